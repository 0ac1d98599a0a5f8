"""Per-pool autoscaling: a pure policy and the drain choice.

Callers (the operator's autoscaler loop, ``tandem up``) use four names:

- :func:`compute_scaling_config` - a pool's knobs from the InferenceCluster spec.
- :func:`compute_observation` - metric samples -> :class:`PoolObservation`.
- :func:`decide` - observation + state -> :class:`ScaleDecision` + new state.
- :func:`choose_victims` / :func:`compute_pod_deletion_costs` - who leaves on a
  scale-down.

See docs/autoscaling.md for the signals and the knobs; the replay that judges the policy
against an SLO oracle is development code (``tandem_dev.bench.autoscale_live``).
"""

from tandem.autoscale.config import ScalingConfig, compute_scaling_config
from tandem.autoscale.drain import WorkerLoad, choose_victims, compute_pod_deletion_costs
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.policy import PolicyState, ScaleDecision, decide, initial_state
from tandem.autoscale.reasons import LimitedBy, LoadSignal, ScaleReason
from tandem.autoscale.signals import LoadSample, PoolCounts, compute_observation

__all__ = [
    "LimitedBy",
    "LoadSample",
    "LoadSignal",
    "PolicyState",
    "PoolCounts",
    "PoolObservation",
    "ScaleDecision",
    "ScaleReason",
    "ScalingConfig",
    "WorkerLoad",
    "choose_victims",
    "compute_observation",
    "compute_pod_deletion_costs",
    "compute_scaling_config",
    "decide",
    "initial_state",
]
