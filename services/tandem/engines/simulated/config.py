"""The simulated engine's options: which GPU, model and parallelism its clock models, how
fast the clock runs, and the vocabulary its tokens come from.

Engine options arrive loosely typed (YAML, JSON on the command line); this pydantic model
is their boundary, so a wrong option fails at start with its name. ``model``,
``accelerator`` and ``tensor_parallel_size`` default to the InferenceCluster's model,
profile and pool parallelism (``render_simulated_options``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tandem.api.v1alpha1 import AcceleratorProfile, KvOffloadSpec
from tandem.capacity.gpus import GpuSpec, gpu_for
from tandem.capacity.models import KvDtype, ModelArchitecture, find_architecture, parse_kv_dtype
from tandem.engines.base import EngineError
from tandem.kv.events import Tier
from tandem.perf.clock import ClockChoice, StepClock, build_clock
from tandem.perf.hardware import performance_for
from tandem.perf.model import (
    Efficiency,
    KvCapacity,
    PerfModel,
    compute_kv_capacity,
    compute_pool_capacity,
)
from tandem.perf.table import PerfTable, PerfTableError, load_perf_table

# gpt-oss speaks o200k_harmony: its embedding table has 201,088 rows, <|return|> (200002)
# ends an answer, and ids below 199,998 are ordinary text (the specials come after).
HARMONY_VOCAB = 201_088
HARMONY_RETURN = 200_002
O200K_ORDINARY = 199_998
# <|channel|>final<|message|>: how a gpt-oss answer opens, so the frontend's harmony
# parser streams what follows as content, token by token.
HARMONY_FINAL_HEADER = (200_005, 17_196, 200_008)


class SimulatedConfigError(EngineError):
    """An engine option is unknown, mistyped or out of range; the message names it."""


class SimulatedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(default="gpt-oss-120b", description="architecture the clock models")
    accelerator: AcceleratorProfile = AcceleratorProfile.GB200
    tensor_parallel_size: int = Field(default=1, ge=1, le=256)
    kv_cache_dtype: str = "auto"
    free_gpu_memory_fraction: float = Field(default=0.9, gt=0, le=1)
    # TensorRT-LLM's defaults: 8192 tokens per step (decode rows + prefill chunks).
    max_num_tokens: int = Field(default=8192, ge=1)
    max_batch_size: int = Field(default=256, ge=1)
    tokens_per_block: int = Field(default=32, ge=1)
    # Modelled seconds per wall second: 10 runs a trace ten times faster than real time.
    speedup: float = Field(default=1.0, gt=0, le=10_000)
    # Where step times come from (tandem.perf.clock): NVIDIA's measured kernel data where
    # it covers the worker, else the analytic model (auto); or a user's measured table.
    clock: ClockChoice = ClockChoice.AUTO
    perf_table: str | None = None
    efficiency: dict[str, float] = Field(default_factory=dict)
    vocab_size: int = Field(default=HARMONY_VOCAB, ge=2)
    eos_token_id: int = Field(default=HARMONY_RETURN, ge=0)
    # The first generated ids, as the model would write them (a harmony header); the
    # rest are drawn from [0, output_token_limit): ordinary text, never a stop token.
    answer_prefix: tuple[int, ...] = HARMONY_FINAL_HEADER
    output_token_limit: int = Field(default=O200K_ORDINARY, ge=1)
    max_context: int | None = Field(default=None, ge=2)
    # Sequences that can hold KV slots at once (each slot is the real handoff payload).
    kv_slots: int = Field(default=4096, ge=1)
    # Reuse of prompt KV (``kv_reuse``): full prompt blocks stay in the pool's free space
    # after their sequence ends and spare a later prompt that begins with them; off by
    # default, as the clock's measurements were taken without reuse.
    prefix_cache: bool = False
    # Offload tiers below the pool (the pool's kvCache.offload): bytes of host memory and
    # of local disk per worker; their blocks come back over the profile's host and disk
    # links (``tandem.perf.hardware``). Nothing is stored: only the clock pays.
    offload_host_bytes: int = Field(default=0, ge=0)
    offload_disk_bytes: int = Field(default=0, ge=0)


class SimulatedConfig:
    """Validated options plus what they resolve to (architecture, GPU, clock).

    On the cpu profile the engine stands in for a CPU engine measured by ``tandem
    profile`` (how ``tandem plan`` plans the reference engine): its ``perf_table`` gives
    the step times, and the table's ``worker`` the model's shape and the KV pool the
    engine preallocates, where on a GPU profile the capacity model sizes the pool.
    """

    def __init__(self, options: SimulatedOptions) -> None:
        self.options = options
        table = _load_table(options.perf_table)
        on_cpu = options.accelerator is AcceleratorProfile.CPU
        worker = table.worker if on_cpu and table is not None else None
        if on_cpu and worker is None:
            raise SimulatedConfigError(
                "option accelerator: the simulated engine models a GPU (gb200, b200, h200 "
                "or h100); on cpu it stands in for an engine measured by `tandem profile` "
                "(option perf_table, a table with its worker)"
            )
        architecture = (
            worker.architecture if worker is not None else find_architecture(options.model)
        )
        if architecture is None:
            raise SimulatedConfigError(
                f"option model: unknown architecture {options.model!r}; known: gpt-oss-120b, "
                "gpt-oss-20b"
            )
        if options.output_token_limit > options.vocab_size:
            raise SimulatedConfigError("option output_token_limit must not exceed vocab_size")
        if any(not 0 <= t < options.vocab_size for t in options.answer_prefix):
            raise SimulatedConfigError("option answer_prefix: ids must lie in [0, vocab_size)")
        self.architecture: ModelArchitecture = architecture
        try:
            self.kv_dtype: KvDtype = parse_kv_dtype(
                options.kv_cache_dtype, native=architecture.native_kv_dtype
            )
            efficiency = Efficiency(**options.efficiency)
        except (TypeError, ValueError) as exc:
            raise SimulatedConfigError(f"option kv_cache_dtype/efficiency: {exc}") from exc
        self.perf = PerfModel(
            architecture,
            None if on_cpu else performance_for(options.accelerator),
            options.tensor_parallel_size,
            self.kv_dtype,
            efficiency,
        )
        # What sizes the KV pool: the GPU's memory (the capacity model), or on cpu the
        # pool the measured engine preallocates.
        self._kv_room: GpuSpec | KvCapacity = (
            gpu_for(options.accelerator)
            if worker is None
            else compute_pool_capacity(self.perf, worker.kv_pool_bytes, options.tokens_per_block)
        )
        try:
            self.clock: StepClock = build_clock(
                self.perf, options.accelerator, choice=options.clock, table=table
            )
        except ValueError as exc:
            raise SimulatedConfigError(f"option clock/perf_table: {exc}") from exc
        self.max_context = options.max_context or architecture.max_context
        if options.offload_host_bytes or options.offload_disk_bytes:
            if not options.prefix_cache:
                raise SimulatedConfigError("KV offload (offload_*_bytes) needs prefix_cache")
            if on_cpu:
                raise SimulatedConfigError(
                    "KV offload (offload_*_bytes) needs a GPU accelerator: its tiers are "
                    "modelled with the profile's host and disk links"
                )

    def offload_blocks(self, capacity: KvCapacity) -> dict[Tier, int]:
        """What each offload tier holds, in pool blocks: a worker's tier keeps every
        rank's shard of a block (``capacity`` counts one GPU's)."""
        block = capacity.block_bytes * self.options.tensor_parallel_size
        return {
            Tier.HOST: self.options.offload_host_bytes // block,
            Tier.DISK: self.options.offload_disk_bytes // block,
        }

    def compute_capacity(
        self,
        *,
        free_gpu_memory_fraction: float = 0.9,
        max_num_tokens: int = 8192,
        tokens_per_block: int = 32,
    ) -> KvCapacity:
        """The KV pool: the capacity model's (``compute_kv_capacity``, with these
        arguments) on a GPU; on cpu the measured worker's own, which no argument changes
        (ValueError when the weights leave no room)."""
        if isinstance(self._kv_room, KvCapacity):
            return self._kv_room
        return compute_kv_capacity(
            self.perf,
            self._kv_room,
            free_gpu_memory_fraction=free_gpu_memory_fraction,
            max_num_tokens=max_num_tokens,
            tokens_per_block=tokens_per_block,
        )

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SimulatedConfig:
        try:
            return cls(SimulatedOptions.model_validate(dict(options)))
        except ValidationError as exc:
            problems = "; ".join(
                f"option {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise SimulatedConfigError(problems) from None

    def digest(self) -> str:
        """What two engines must share to continue each other's sequences: the model,
        its KV dtype, the vocabulary and the payload format (not the clock)."""
        o = self.options
        facts = (
            f"simulated/v1;{self.architecture.name};{self.kv_dtype.value};{o.vocab_size};"
            f"{o.eos_token_id};{o.output_token_limit};{o.tokens_per_block};{o.answer_prefix}"
        )
        return hashlib.sha256(facts.encode()).hexdigest()[:16]


def render_simulated_options(
    options: Mapping[str, Any],
    *,
    model: str,
    accelerator: AcceleratorProfile,
    tensor_parallel_size: int,
    offload: KvOffloadSpec,
) -> dict[str, Any]:
    """``options`` with what the spec already says filled in (pure): the model, the
    accelerator profile (unless it is cpu), the pool's TP size, and its
    ``kvCache.offload`` (which turns the prefix cache on unless the options say
    otherwise; the disk tier's path is the reference engine's business, nothing is
    written here)."""
    defaults: dict[str, Any] = {"model": model, "tensor_parallel_size": tensor_parallel_size}
    if accelerator is not AcceleratorProfile.CPU:
        defaults["accelerator"] = accelerator.value
    tiers: dict[str, Any] = {}
    if offload.enabled:
        defaults["prefix_cache"] = True
        tiers = {
            "offload_host_bytes": offload.host_bytes,
            "offload_disk_bytes": offload.disk_bytes,
        }
    return {**defaults, **options, **tiers}


def _load_table(path: str | None) -> PerfTable | None:
    if path is None:
        return None
    try:
        return load_perf_table(path)
    except PerfTableError as exc:
        raise SimulatedConfigError(f"option perf_table: {exc}") from exc
