"""The words a scaling decision is reported in: one CamelCase constant per situation.

These strings land in WorkerPool status (``lastScaleReason``), in Kubernetes Events and
in the ``ScalingLimited`` condition, so they are API: add new ones, never rename.
"""

from __future__ import annotations

import enum


class ScaleReason(enum.StrEnum):
    """Why the desired replica count is what it is."""

    # The load signal asked for a change, or confirmed the current size.
    QUEUED_TOKENS_ABOVE_TARGET = "QueuedTokensAboveTarget"
    QUEUED_TOKENS_BELOW_TARGET = "QueuedTokensBelowTarget"
    PROMPT_TOKEN_RATE_ABOVE_TARGET = "PromptTokenRateAboveTarget"
    PROMPT_TOKEN_RATE_BELOW_TARGET = "PromptTokenRateBelowTarget"
    ACTIVE_SEQUENCES_ABOVE_TARGET = "ActiveSequencesAboveTarget"
    ACTIVE_SEQUENCES_BELOW_TARGET = "ActiveSequencesBelowTarget"
    KV_UTILIZATION_ABOVE_TARGET = "KvUtilizationAboveTarget"
    KV_UTILIZATION_BELOW_TARGET = "KvUtilizationBelowTarget"
    DEMAND_WHILE_SCALED_TO_ZERO = "DemandWhileScaledToZero"
    POOL_IDLE = "PoolIdle"
    WITHIN_TOLERANCE = "WithinTolerance"
    # The spec bounds moved under the current size.
    BELOW_MIN_REPLICAS = "BelowMinReplicas"
    ABOVE_MAX_REPLICAS = "AboveMaxReplicas"
    # The load asked for a change that a limit held back entirely.
    SCALE_UP_STABILIZING = "ScaleUpStabilizing"
    SCALE_DOWN_STABILIZING = "ScaleDownStabilizing"
    AT_MAX_REPLICAS = "AtMaxReplicas"
    AT_MIN_REPLICAS = "AtMinReplicas"
    UNSCHEDULABLE = "Unschedulable"


class LimitedBy(enum.StrEnum):
    """Which rule kept the desired count from following the load signal, if any."""

    NONE = "None"
    MAX_REPLICAS = "MaxReplicas"
    MIN_REPLICAS = "MinReplicas"
    MAX_STEP = "MaxStep"
    STABILIZATION = "Stabilization"
    UNSCHEDULABLE = "Unschedulable"
    IDLE_WINDOW = "IdleWindow"  # the last worker stays until the pool was idle long enough


class LoadSignal(enum.StrEnum):
    """The signal that set the recommendation (the largest one, for decode)."""

    QUEUED_TOKENS = "QueuedTokens"
    PROMPT_TOKEN_RATE = "PromptTokenRate"
    ACTIVE_SEQUENCES = "ActiveSequences"
    KV_UTILIZATION = "KvUtilization"
    IDLE = "Idle"
