"""Condition types and reasons: CamelCase constants, one place.

Reasons are part of the API: users alert on them (``reason == "InsufficientGPU"``), so
they never change spelling and each has one meaning.
"""

from __future__ import annotations

# Condition types on InferenceCluster and WorkerPool.
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
# GPU profiles with NVLink domains (GB200 NVL72): are the cluster's workers in one?
# Informational: never blocks Ready.
NVLINK_LOCAL = "NVLinkLocal"
# Set by the autoscaler (builtin mode only); its True reasons are the policy's
# ``ScaleReason`` values ``Unschedulable`` and ``AtMaxReplicas``.
SCALING_LIMITED = "ScalingLimited"
DESIRED_WITHIN_RANGE = "DesiredWithinRange"  # ScalingLimited=False
# Set by the autoscaler (builtin mode only): can it read the load it scales on? While it
# cannot, pools keep their size.
SCALING_ACTIVE = "ScalingActive"
METRICS_AVAILABLE = "MetricsAvailable"  # ScalingActive=True
# ScalingActive=False: out of the cluster with no --frontend-metrics-url for it (frontend
# pods are unreachable from there); in the cluster no frontend pod is ready yet; or no
# frontend answered.
NO_METRICS_SOURCE = "NoMetricsSource"
NO_READY_FRONTEND = "NoReadyFrontend"
METRICS_UNAVAILABLE = "MetricsUnavailable"

# planning.mode check or auto: does the deployed (check) or planned (auto) shape meet
# spec.slo at spec.workload's highest rate, as the planner predicts? Informational: never
# blocks Ready.
SLO_PREDICTED = "SloPredicted"
SLO_MET = "SloMet"  # True
SLO_MISSED = "SloMissed"  # False: the message names each percentile over its target
PLANNING = "Planning"  # Unknown: the plan for the current spec is being made
PLANNING_FAILED = "PlanningFailed"  # Unknown: no plan (cannot plan the spec, or gave up)
# Unknown: the engine has no step-time table yet; its profiling Job measures one.
PROFILING = "Profiling"
PROFILING_FAILED = "ProfilingFailed"  # Unknown: the profiling Job failed (not retried)

# Ready=True
CLUSTER_READY = "ClusterReady"  # every pool and the frontend have all desired replicas ready
POOL_READY = "PoolReady"

# Ready=False / Progressing=True while converging
PODS_NOT_READY = "PodsNotReady"  # created, not all ready yet
ROLLING_OUT = "RollingOut"  # template changed, pods being replaced
SCALING_UP = "ScalingUp"
SCALING_DOWN = "ScalingDown"
WAITING_FOR_WORKLOAD = "WaitingForWorkload"  # the workload controller has not caught up
NO_DECODE_WORKERS = "NoDecodeWorkers"  # nobody can stream tokens
SCALED_TO_ZERO = "ScaledToZero"  # idle, no decode worker; a request starts one

# Progressing=False
UP_TO_DATE = "UpToDate"

# Degraded=True: something needs a human (or capacity) before the cluster can be Ready.
INSUFFICIENT_GPU = "InsufficientGPU"
INSUFFICIENT_CPU = "InsufficientCPU"
INSUFFICIENT_MEMORY = "InsufficientMemory"
INSUFFICIENT_RDMA = "InsufficientRDMA"  # no node has a free RDMA device-plugin resource
NO_MATCHING_NODES = "NoMatchingNodes"  # selector/affinity/taints exclude every node
UNSCHEDULABLE = "Unschedulable"  # any other scheduler refusal
VOLUME_MISSING = "VolumeMissing"  # a PVC the pods mount (the model's) does not exist
IMAGE_PULL_FAILED = "ImagePullFailed"
CRASH_LOOP = "CrashLoopBackOff"
# A pod of a multi-node worker's group exited: the LeaderWorkerSet recreates the group.
GROUP_DOWN = "GroupDown"
INVALID_SPEC = "InvalidSpec"
APPLY_FAILED = "ApplyFailed"
LEADER_WORKER_SET_MISSING = "LeaderWorkerSetMissing"
COMPUTE_DOMAIN_MISSING = "ComputeDomainMissing"  # NVIDIA's DRA driver (its CRD) is absent
# A Secret named as the cluster's MPI SSH keys exists, holds no key pair and is not the
# operator's: it is not overwritten, and nothing is applied (mpi_keys.py).
MPI_SECRET_CONFLICT = "MpiSecretConflict"
# The same for the token of the cluster's Ray groups (ray_token.py).
RAY_SECRET_CONFLICT = "RaySecretConflict"
# A pool's worker cannot hold weights + workspace + its batch's KV on its GPUs
# (tandem.capacity); the spec is not applied (capacity_gate).
INSUFFICIENT_GPU_MEMORY = "InsufficientGPUMemory"

# Degraded=False
AS_EXPECTED = "AsExpected"

# NVLinkLocal
SAME_NVLINK_DOMAIN = "SameNVLinkDomain"
SPLIT_ACROSS_NVLINK_DOMAINS = "SplitAcrossNVLinkDomains"
NO_WORKERS_SCHEDULED = "NoWorkersScheduled"

# Event reasons beyond the condition reasons above.
EVENT_READY = "Ready"
EVENT_NOT_READY = "NotReady"
EVENT_RECOVERED = "Recovered"
EVENT_POOL_RESIZED = "PoolResized"
EVENT_PLANNED = "Planned"  # a new plan that meets the SLO (else its SloPredicted reason)
EVENT_REPLANNING = "Replanning"  # the observed workload left the plan: planning for it
EVENT_PROFILED = "Profiled"  # the profiling Job's table is recorded (else ProfilingFailed)
EVENT_MPI_KEYS_ADOPTED = "MpiKeysAdopted"  # a hand-made MPI key Secret is now the operator's
