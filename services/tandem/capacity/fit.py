"""Does a worker fit its GPUs? Weights + workspace + KV for the batch, per GPU.

TensorRT-LLM loads the weights, reserves its runtime workspace, then gives the KV pool
``free_gpu_memory_fraction`` of whatever is left. So a pool fits when

    weights / TP + workspace < GPU memory, and
    max_batch x KV(seq_tokens) per GPU <= fraction x (GPU memory - weights/TP - workspace).

The workspace is an estimate (CUDA context, cuBLAS/NCCL workspaces and CUDA graphs, the
activations of one ``max_num_tokens`` step, the cache transceiver's staging buffer):
calibrate ``RuntimeOverhead`` against ``nvidia-smi`` on real hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity.gpus import GpuSpec, gpu_for
from tandem.capacity.kv import kv_bytes_per_gpu
from tandem.capacity.models import GIB, KvDtype, ModelArchitecture

# TP sizes worth suggesting when a pool does not fit (powers of two up to an NVL8 box,
# then multi-node groups).
_TP_CANDIDATES = (1, 2, 4, 8, 16, 32)


class CapacityError(ValueError):
    """A pool cannot fit its GPUs; the message carries the numbers."""


class TensorParallelPool(Protocol):
    """What the fit check reads from a pool (``PoolSpec`` satisfies it)."""

    @property
    def tensor_parallel_size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RuntimeOverhead:
    """Per-GPU memory besides weights and KV."""

    fixed_bytes: int = 3 * GIB
    # Activation bytes per token per hidden unit in one forward step (bf16 residual
    # stream, attention/MoE intermediates and their copies); a deliberate overestimate.
    activation_bytes_per_token_hidden: int = 32

    def workspace_bytes(self, model: ModelArchitecture, max_num_tokens: int) -> int:
        activations = max_num_tokens * model.hidden_size * self.activation_bytes_per_token_hidden
        return self.fixed_bytes + activations


@dataclass(frozen=True, slots=True)
class FitReport:
    model: str
    gpu: str
    gpu_memory_bytes: int
    tensor_parallel_size: int
    max_batch: int
    seq_tokens: int
    kv_dtype: KvDtype
    free_gpu_memory_fraction: float
    weight_bytes_per_gpu: int
    workspace_bytes: int
    kv_pool_bytes: int
    kv_bytes_per_sequence: int
    kv_demand_bytes: int
    max_sequences: int
    suggested_tensor_parallel_size: int | None

    @property
    def weights_fit(self) -> bool:
        return self.weight_bytes_per_gpu + self.workspace_bytes < self.gpu_memory_bytes

    @property
    def fits(self) -> bool:
        return self.weights_fit and self.kv_demand_bytes <= self.kv_pool_bytes

    @property
    def message(self) -> str:
        where = (
            f"{self.model} at TP{self.tensor_parallel_size} on {self.gpu} "
            f"({_gb(self.gpu_memory_bytes)}, {_gib(self.gpu_memory_bytes)})"
        )
        hint = ""
        if self.suggested_tensor_parallel_size is not None and not self.fits:
            hint = f"; TP{self.suggested_tensor_parallel_size} would fit"
        if not self.weights_fit:
            return (
                f"{where}: weights need {_gib(self.weight_bytes_per_gpu)} per GPU plus "
                f"{_gib(self.workspace_bytes)} of workspace, more than the GPU holds{hint}"
            )
        budget = (
            f"{_gib(self.kv_pool_bytes)} is left for KV after {_gib(self.weight_bytes_per_gpu)} "
            f"of weights and {_gib(self.workspace_bytes)} of workspace "
            f"(free_gpu_memory_fraction {self.free_gpu_memory_fraction:g})"
        )
        need = (
            f"{_sequences(self.max_batch)} of {self.seq_tokens:,} tokens need "
            f"{_gib(self.kv_demand_bytes)} of KV per GPU "
            f"({_gib(self.kv_bytes_per_sequence)} each, {self.kv_dtype.value})"
        )
        if self.fits:
            return f"{where}: fits — {need}; {budget}; room for {_sequences(self.max_sequences)}"
        return (
            f"{where}: does not fit — {need}, but only {budget}; at most "
            f"{self.max_sequences} such sequences fit{hint}"
        )

    def raise_if_unfit(self) -> None:
        if not self.fits:
            raise CapacityError(self.message)


@dataclass(frozen=True, slots=True)
class _FitInputs:
    model: ModelArchitecture
    gpu: GpuSpec
    max_batch: int
    seq_tokens: int
    dtype: KvDtype
    fraction: float
    max_num_tokens: int
    tokens_per_block: int
    transfer_buffer_tokens: int
    overhead: RuntimeOverhead


def check_fit(
    model: ModelArchitecture,
    pool: TensorParallelPool,
    gpu: GpuSpec | AcceleratorProfile,
    max_batch: int,
    *,
    seq_tokens: int,
    kv_dtype: KvDtype | None = None,
    free_gpu_memory_fraction: float = 0.9,
    max_num_tokens: int = 8192,
    tokens_per_block: int = 32,
    transfer_buffer_tokens: int = 0,
    overhead: RuntimeOverhead | None = None,
) -> FitReport:
    """Check one worker of ``pool`` (``tensor_parallel_size`` GPUs) against ``gpu``.

    ``seq_tokens`` is the longest sequence a slot holds (prompt for prefill workers,
    prompt + output for decode workers); ``transfer_buffer_tokens`` the cache
    transceiver's ``max_tokens_in_buffer``.
    """
    if max_batch < 1:
        raise ValueError("max_batch must be >= 1")
    if not 0 < free_gpu_memory_fraction <= 1:
        raise ValueError("free_gpu_memory_fraction must lie in (0, 1]")
    inputs = _FitInputs(
        model=model,
        gpu=gpu if isinstance(gpu, GpuSpec) else gpu_for(gpu),
        max_batch=max_batch,
        seq_tokens=seq_tokens,
        dtype=kv_dtype or model.native_kv_dtype,
        fraction=free_gpu_memory_fraction,
        max_num_tokens=max_num_tokens,
        tokens_per_block=tokens_per_block,
        transfer_buffer_tokens=transfer_buffer_tokens,
        overhead=overhead or RuntimeOverhead(),
    )
    tp = pool.tensor_parallel_size
    report = _report(inputs, tp, suggested=None)
    if report.fits:
        return report
    suggestion = next(
        (c for c in _TP_CANDIDATES if c > tp and _report(inputs, c, suggested=None).fits), None
    )
    return _report(inputs, tp, suggested=suggestion)


def _report(inputs: _FitInputs, tp: int, *, suggested: int | None) -> FitReport:
    model, dtype = inputs.model, inputs.dtype
    weights = math.ceil(model.weight_bytes / tp)
    transfer_buffer = kv_bytes_per_gpu(
        model, inputs.transfer_buffer_tokens, dtype=dtype, tensor_parallel_size=tp
    )
    workspace = inputs.overhead.workspace_bytes(model, inputs.max_num_tokens) + transfer_buffer
    left = inputs.gpu.memory_bytes - weights - workspace
    kv_pool = max(0, math.floor(left * inputs.fraction))
    per_sequence = kv_bytes_per_gpu(
        model,
        inputs.seq_tokens,
        dtype=dtype,
        tensor_parallel_size=tp,
        tokens_per_block=inputs.tokens_per_block,
    )
    return FitReport(
        model=model.name,
        gpu=inputs.gpu.product,
        gpu_memory_bytes=inputs.gpu.memory_bytes,
        tensor_parallel_size=tp,
        max_batch=inputs.max_batch,
        seq_tokens=inputs.seq_tokens,
        kv_dtype=dtype,
        free_gpu_memory_fraction=inputs.fraction,
        weight_bytes_per_gpu=weights,
        workspace_bytes=workspace,
        kv_pool_bytes=kv_pool,
        kv_bytes_per_sequence=per_sequence,
        kv_demand_bytes=per_sequence * inputs.max_batch,
        max_sequences=kv_pool // per_sequence if per_sequence else 0,
        suggested_tensor_parallel_size=suggested,
    )


def _sequences(n: int) -> str:
    return f"{n} sequence" if n == 1 else f"{n} sequences"


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _gb(n: int) -> str:
    return f"{n / 1e9:.0f} GB"
