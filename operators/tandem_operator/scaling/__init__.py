"""The built-in autoscaler: queue depth and load -> WorkerPool replicas.

- ``decisions``      the pure half: cluster objects and readings in, API bodies out
- ``metrics_source`` where the load comes from: the frontends' router metrics
- ``autoscaler``     the loop, one per cluster, leader only (the I/O shell)
"""
