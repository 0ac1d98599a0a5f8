"""The Tandem operator: InferenceCluster -> WorkerPools -> Deployments, Services, PDBs.

Layout, bottom to top (a package imports only from those above it in this list):

- ``names``, ``reasons``, ``metrics``, ``problems``: the shared vocabulary (child names
  and labels, condition reasons, Prometheus metrics, log-once for recurring problems)
- ``kube/``     Kubernetes plumbing: client, informers, work queue, Lease, SSA diff, health
- ``render/``   spec -> every child object (pure)
- ``status/``   live objects -> observations -> status (pure)
- ``scaling/``  the built-in autoscaler: pure decisions, metrics source, the loop
- ``planning/`` plans from spec.slo and spec.workload: child processes, a cache by hash
- ``controller`` the reconcile script: render -> apply -> observe -> status -> events
- ``manager``   wires it all together; ``tandem operator run`` calls :func:`manager.run`
"""
