"""May this generation of an InferenceCluster be rolled out? (pure)

Before anything is applied, the spec must render into options the engine accepts
(TensorRT-LLM option names and rules, a loadable model source) and every pool's worker
must fit its GPUs (``tandem.capacity.plan_cluster``: weights / TP + workspace + the
batch's KV per GPU). A spec that fails is **not applied at all** — no child of that
generation, in any pool:

* no half-applied state: the prefill pool never runs a generation the decode pool
  refused (their engine options, transfer buffers and KV dtype must agree);
* what runs keeps running: an edit that would not fit does not take down a serving
  cluster; the previous generation's pods stay, ``status.observedGeneration`` stays at
  the last applied generation, and ``Degraded`` says why with the numbers (and whether
  an earlier generation runs at all: a new cluster has none);
* nothing is scheduled that could only crash-loop on a GPU with an out-of-memory error.

Fixing the spec (or the model's limits) makes the next reconcile apply it.
"""

from __future__ import annotations

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.capacity.plan import plan_cluster
from tandem.engines.trtllm.config import TrtllmConfigError
from tandem_operator import reasons
from tandem_operator.render.contract import render_engine_options
from tandem_operator.render.model_source import ModelSourceError
from tandem_operator.status.observe import Failure


def not_applied(cr: InferenceCluster) -> str:
    """What a refused generation leaves running: an earlier one, or nothing at all."""
    applied = cr.status.observed_generation if cr.status else None
    if applied is None:
        return "nothing was applied (no earlier generation of this cluster runs)"
    return (
        "nothing of this generation was applied; the last applied one (generation "
        f"{applied}) keeps running"
    )


def check_rollout(cr: InferenceCluster) -> Failure | None:
    """None when ``cr`` may be applied; else the reason and message for its status."""
    try:
        for role in PoolRole:
            render_engine_options(cr, role)
        plan = plan_cluster(cr)
    except (TrtllmConfigError, ModelSourceError) as exc:
        return Failure(reasons.INVALID_SPEC, f"{exc}; {not_applied(cr)}")
    if plan.skipped is not None or plan.fits:
        return None
    unfit = "; ".join(
        f"{pool.role.value} pool (batch {pool.max_batch} from {pool.max_batch_source}): "
        f"{pool.report.message}"
        for pool in plan.pools
        if not pool.fits
    )
    return Failure(reasons.INSUFFICIENT_GPU_MEMORY, f"{unfit}; {not_applied(cr)}")
