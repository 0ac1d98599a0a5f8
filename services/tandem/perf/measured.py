"""The measured clock: engine steps priced from NVIDIA's AIConfigurator database.

aiconfigurator-core (PyPI, Apache-2.0, the ``perf`` extra) ships TensorRT-LLM kernel
timings measured on GB200, B200, H200 and H100 -- GEMMs, context and generation
attention, MoE, NCCL and all-reduce -- and a forward-pass model over them
(``aiconfigurator_core.sdk.RustForwardPassPerfModel``) that prices one TensorRT-LLM
engine step from the step's totals: how many prefill requests, their new tokens and the
context they continue, how many decode rows and the KV length each attends to. That is
what Tandem's scheduler knows of a step, so the mapping is direct:

* a prefill chunk of ``new`` tokens after ``cached`` ones adds one prefill request,
  ``new`` prefill tokens and ``cached`` prior KV tokens (AIConfigurator's ``run_mixed``
  averages a chunk over the whole prompt instead, which undercounts later chunks);
* a decode row whose context holds ``c`` tokens attends to ``c + 1`` keys.

Several chunks or rows of one step are priced at their mean shape, as the model defines.

Parallelism: gpt-oss's experts are measured with expert parallelism only (``moe_tp=1``),
so a worker of TP ranks runs attention TP-way and its experts EP-way, as TensorRT-LLM
deploys gpt-oss. Quantization as TensorRT-LLM serves gpt-oss: MXFP4 experts with MXFP8
activations on Blackwell (``w4a8_mxfp4_mxfp8``, AIConfigurator's own choice there) and
with BF16 activations on Hopper, which has no MXFP8 kernels (``w4a16_mxfp4``); the other
GEMMs in BF16; the KV cache in the engine's KV dtype.

Where the database cannot answer -- the package is not installed, another model, the cpu
profile, a parallelism it did not measure (gpt-oss-120b on one H100) -- building the
clock raises :class:`MeasuredClockUnavailable` with the reason, and the caller falls back
to the analytic model and says so.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity.models import KvDtype
from tandem.perf.model import Chunk, PerfModel

logger = logging.getLogger(__name__)

DISTRIBUTION = "aiconfigurator-core"
BACKEND = "trtllm"
# AIConfigurator's system names for Tandem's GPU profiles.
SYSTEMS = {
    AcceleratorProfile.GB200: "gb200",
    AcceleratorProfile.B200: "b200_sxm",
    AcceleratorProfile.H200: "h200_sxm",
    AcceleratorProfile.H100: "h100_sxm",
}
BLACKWELL = frozenset({AcceleratorProfile.GB200, AcceleratorProfile.B200})
# Hugging Face ids of the architectures the database has configs for.
MODELS = {"gpt-oss-120b": "openai/gpt-oss-120b", "gpt-oss-20b": "openai/gpt-oss-20b"}
KV_DTYPES = {KvDtype.BF16: "bfloat16", KvDtype.FP16: "float16", KvDtype.FP8: "fp8"}
# Steps are cached by their shape with mean contexts rounded to this many tokens (one KV
# block): attention cost changes by far less than the database's own spread within it.
CONTEXT_QUANTUM = 32
CACHE_LIMIT = 1 << 16


class MeasuredClockUnavailable(Exception):
    """The database cannot price this worker; the message says why."""


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step as the forward-pass model reads it (contexts are per-request means)."""

    prefill_requests: int
    prefill_tokens: int
    prefill_prior: int  # mean cached tokens before each chunk, rounded
    decode_requests: int
    decode_kv: int  # mean keys each decode row attends to, rounded

    @classmethod
    def of(cls, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> StepShape:
        prior = _mean(sum(c.cached for c in chunks), len(chunks))
        kv = _mean(sum(decode_contexts) + len(decode_contexts), len(decode_contexts))
        return cls(len(chunks), sum(c.new for c in chunks), prior, len(decode_contexts), kv)

    def as_metrics(self) -> dict[str, dict[str, int]]:
        """The ``scheduled_requests`` document ``estimate_forward_pass_time_ms`` takes."""
        return {
            "scheduled_requests": {
                "num_prefill_requests": self.prefill_requests,
                "sum_prefill_tokens": self.prefill_tokens,
                "sum_prefill_kv_tokens": self.prefill_prior * self.prefill_requests,
                "num_decode_requests": self.decode_requests,
                "sum_decode_kv_tokens": self.decode_kv * self.decode_requests,
            }
        }


def _mean(total: int, count: int) -> int:
    if count == 0:
        return 0
    return round(total / count / CONTEXT_QUANTUM) * CONTEXT_QUANTUM


@dataclass(frozen=True, slots=True)
class MeasuredSource:
    """Which measurements price the steps: named in every figure built on them."""

    package_version: str
    system: str
    data_version: str
    tensor_parallel_size: int
    moe_dtype: str
    kv_dtype: str

    def describe(self) -> str:
        tp = self.tensor_parallel_size
        return (
            f"measured: {DISTRIBUTION} {self.package_version} {self.system} {BACKEND} "
            f"{self.data_version} (attention TP{tp}, experts EP{tp}, {self.moe_dtype}, "
            f"KV {self.kv_dtype})"
        )


@dataclass(slots=True)
class MeasuredClock:
    """A :class:`~tandem.perf.clock.StepClock` over the database; KV transfers still
    come from the capacity model's bytes over the profile's link (``perf``)."""

    perf: PerfModel
    measured: MeasuredSource
    estimate_ms: Callable[[dict[str, dict[str, int]]], float | None]
    _cache: dict[StepShape, float] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return self.measured.describe()

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        if not decode_contexts and not chunks:
            return 0.0
        shape = StepShape.of(decode_contexts, chunks)
        seconds = self._cache.get(shape)
        if seconds is None:
            seconds = self.price(shape)
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[shape] = seconds
        return seconds

    def price(self, shape: StepShape) -> float:
        ms = self.estimate_ms(shape.as_metrics())
        if ms is None or not ms > 0:
            raise MeasuredClockUnavailable(f"{self.source}: no estimate for {shape}")
        return ms / 1e3

    def kv_transfer_seconds(self, tokens: int) -> float:
        return self.perf.kv_transfer_seconds(tokens)


def choose_moe_dtype(profile: AcceleratorProfile) -> str:
    return "w4a8_mxfp4_mxfp8" if profile in BLACKWELL else "w4a16_mxfp4"


def build_measured_clock(perf: PerfModel, profile: AcceleratorProfile) -> MeasuredClock:
    """The database's clock for ``perf``'s model and parallelism on ``profile``, checked
    by pricing a small step (MeasuredClockUnavailable when it cannot).

    One per worker shape and process: every engine of that shape shares the clock and the
    steps it has priced, so a planner simulating dozens of deployments prices each step
    shape once (a price costs about 2 ms, a build with its check about 60 ms)."""
    built = _shared_clock(perf, profile)
    if isinstance(built, MeasuredClockUnavailable):
        raise MeasuredClockUnavailable(str(built))
    return built


@functools.lru_cache(maxsize=64)
def _shared_clock(
    perf: PerfModel, profile: AcceleratorProfile
) -> MeasuredClock | MeasuredClockUnavailable:
    try:
        return _build_measured_clock(perf, profile)
    except MeasuredClockUnavailable as exc:
        return exc  # kept too: asking again would not change the answer


def _build_measured_clock(perf: PerfModel, profile: AcceleratorProfile) -> MeasuredClock:
    system = SYSTEMS.get(profile)
    model = MODELS.get(perf.model.name)
    kv_dtype = KV_DTYPES.get(perf.kv_dtype)
    if system is None or model is None or kv_dtype is None:
        raise MeasuredClockUnavailable(
            f"no measured data for {perf.model.name} with KV {perf.kv_dtype.value} on "
            f"{profile.value} (it covers gpt-oss-120b and gpt-oss-20b on gb200, b200, h200, "
            "h100)"
        )
    try:
        version = importlib.metadata.version(DISTRIBUTION)
        sdk = _import_sdk()
    except (importlib.metadata.PackageNotFoundError, ImportError):
        raise MeasuredClockUnavailable(
            f"{DISTRIBUTION} is not installed (pip install 'tandem[perf]')"
        ) from None
    tp = perf.tensor_parallel_size
    moe_dtype = choose_moe_dtype(profile)
    data_version = _data_version(system)
    config: dict[str, Any] = {
        "schema_version": 1,
        "model_name": model,
        "system_name": system,
        "backend": BACKEND,
        "backend_version": data_version,
        "tp_size": tp,
        "pp_size": 1,
        "moe_tp_size": 1,
        "moe_ep_size": tp,
        "moe_dtype": moe_dtype,
        "kv_cache_dtype": kv_dtype,
    }
    source = MeasuredSource(version, system, data_version, tp, moe_dtype, kv_dtype)
    try:
        forward_pass = sdk.RustForwardPassPerfModel.from_native(config)
        clock = MeasuredClock(perf, source, forward_pass.estimate_forward_pass_time_ms)
        clock.price(StepShape(1, 256, 0, 1, 1024))
    except Exception as exc:  # the package's own errors: PerfDataNotAvailableError, ...
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MeasuredClockUnavailable(f"{source.describe()}: {first_line}") from None
    return clock


class _Sdk:
    """The two entry points of aiconfigurator-core this module uses."""

    def __init__(self, perf_database: Any, forward_pass_model: Any) -> None:
        self.perf_database = perf_database
        self.RustForwardPassPerfModel = forward_pass_model


@functools.cache
def _data_version(system: str) -> str:
    """The database version aiconfigurator-core calls current for ``system`` (reading
    its index of databases takes about a second, so once per process)."""
    version: str = _import_sdk().perf_database.get_latest_database_version(system, BACKEND)
    return version


def _import_sdk() -> _Sdk:
    from aiconfigurator_core.sdk import RustForwardPassPerfModel, perf_database

    # Logged once per database: it has attention-lane defaults for sglang and vllm only,
    # and trtllm's default lane is what the measurements used.
    logging.getLogger("aiconfigurator_core.sdk.attention_lanes").setLevel(logging.ERROR)
    return _Sdk(perf_database, RustForwardPassPerfModel)
