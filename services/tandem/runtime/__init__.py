"""The local runtime: ``tandem up`` realizes an InferenceCluster as local processes.

``plan`` decides (pure), ``supervisor`` starts/watches/scales/stops processes,
``launcher`` implements up/detach/down, ``status`` reports."""
