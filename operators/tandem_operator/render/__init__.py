"""Render: an InferenceCluster's spec -> every object the operator applies (pure).

No client, clock or environment: the same spec renders the same objects.

- ``children``       every child of a cluster (WorkerPools, Deployments/LWS, Services, ...)
- ``pods``           pod templates: containers, probes, drain hook, grace period
- ``profiles``       accelerator profile -> the hardware parts of a worker pod
- ``fabric``         RDMA devices and the UCX/NIXL/NCCL environment of a GPU worker
- ``placement``      NVLink-domain affinity and ComputeDomains on GB200 NVL72
- ``multinode``      workers spanning nodes: LeaderWorkerSet groups under Ray or MPI
- ``contract``       the command line and config document each data-plane pod gets
- ``model_source``   where a worker finds the weights: path + volumes
- ``credentials``    the cluster's credentials Secret and its rotation plan
- ``mpi_keys``       the MPI SSH key Secret of workers spanning nodes, and its rotation
- ``ray_token``      the token Ray groups authenticate with
- ``access``         the frontend's RBAC (EndpointSlices in its namespace)
- ``network_policy`` who may reach the workers
"""
