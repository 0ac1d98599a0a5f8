"""Condition types and reasons: CamelCase constants, one place.

Reasons are part of the API: users alert on them (``reason == "InsufficientGPU"``), so
they never change spelling and each has one meaning.
"""

from __future__ import annotations

# Condition types on InferenceCluster and WorkerPool.
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"

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

# Progressing=False
UP_TO_DATE = "UpToDate"

# Degraded=True: something needs a human (or capacity) before the cluster can be Ready.
INSUFFICIENT_GPU = "InsufficientGPU"
INSUFFICIENT_CPU = "InsufficientCPU"
INSUFFICIENT_MEMORY = "InsufficientMemory"
NO_MATCHING_NODES = "NoMatchingNodes"  # selector/affinity/taints exclude every node
UNSCHEDULABLE = "Unschedulable"  # any other scheduler refusal
IMAGE_PULL_FAILED = "ImagePullFailed"
CRASH_LOOP = "CrashLoopBackOff"
INVALID_SPEC = "InvalidSpec"
APPLY_FAILED = "ApplyFailed"
LEADER_WORKER_SET_MISSING = "LeaderWorkerSetMissing"

# Degraded=False
AS_EXPECTED = "AsExpected"

# Event reasons beyond the condition reasons above.
EVENT_READY = "Ready"
EVENT_NOT_READY = "NotReady"
EVENT_RECOVERED = "Recovered"
EVENT_POOL_RESIZED = "PoolResized"
