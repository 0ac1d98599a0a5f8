"""Tensor parallelism for the reference engine: one model's attention heads and MLP
columns split across ranks (``shard``), partial sums reduced over a TCP link between
the ranks (``link``), follower ranks run in lock-step with the leader (``follower``),
placed one per node of a Ray cluster (``ray_ranks``)."""
