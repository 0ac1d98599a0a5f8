"""The Tandem operator: InferenceCluster -> WorkerPools -> Deployments, Services, PDBs.

Layout (one job per module):

- ``names``     deterministic child names, labels, annotations (pure)
- ``reasons``   condition types and CamelCase reasons (constants)
- ``profiles``  accelerator profile -> hardware parts of a worker pod (pure)
- ``pods``      pod templates: containers, probes, drain hook, grace period (pure)
- ``render``    ``render_*(cr) -> list[dict]``: every child object (pure)
- ``observe``   raw API objects -> small typed observations (pure)
- ``status``    ``compute_status(cr, observed) -> StatusResult`` (pure)
- ``diff``      "does the live object already hold what we would apply?" (pure)
- ``k8s``       thin kubernetes_asyncio wrapper: server-side apply, list/watch, 404/409 policy
- ``informer``  list+watch caches that feed the work queue
- ``workqueue`` deduplicating, rate-limited work queue (controller-runtime semantics)
- ``controller`` the reconcile script: render -> apply -> observe -> status -> events
- ``leader``    Lease-based leader election (coordination.k8s.io/v1)
- ``health``    ``/metrics``, ``/healthz``, ``/readyz``
- ``manager``   wires it all together; ``tandem operator run`` calls :func:`manager.run`
"""
