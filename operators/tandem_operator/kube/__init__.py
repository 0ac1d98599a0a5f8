"""The Kubernetes plumbing, independent of what the operator reconciles.

- ``client``    thin kubernetes_asyncio wrapper: server-side apply, list/watch, 404/409 policy
- ``informer``  list+watch caches that feed the work queue
- ``workqueue`` deduplicating, rate-limited work queue (controller-runtime semantics)
- ``leader``    Lease-based leader election (coordination.k8s.io/v1)
- ``diff``      "does the live object already hold what we would apply?" (pure)
- ``health``    ``/metrics``, ``/healthz``, ``/readyz``
"""
