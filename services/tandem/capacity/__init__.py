"""The capacity model: KV bytes per token, weight memory, GPU memory, fit checks.

Pure functions shared by ``tandem plan``, the operator (reject specs that cannot fit),
the KV benchmarks and the docs. ``tandem.capacity.plan`` (the per-cluster plan) is
imported on its own: it renders engine options and so depends on the engine package.
"""

from tandem.capacity.fit import CapacityError, FitReport, RuntimeOverhead, check_fit
from tandem.capacity.gpus import GPUS, GpuArchitecture, GpuSpec, gpu_for
from tandem.capacity.kv import (
    kv_bytes,
    kv_bytes_per_gpu,
    kv_bytes_per_token_per_layer,
    kv_heads_per_gpu,
    kv_token_layers,
    round_up,
)
from tandem.capacity.models import (
    ARCHITECTURES,
    GPT_OSS_20B,
    GPT_OSS_120B,
    TANDEM_REFERENCE,
    KvDtype,
    ModelArchitecture,
    find_architecture,
    parse_kv_dtype,
)

__all__ = [
    "ARCHITECTURES",
    "GPT_OSS_20B",
    "GPT_OSS_120B",
    "GPUS",
    "TANDEM_REFERENCE",
    "CapacityError",
    "FitReport",
    "GpuArchitecture",
    "GpuSpec",
    "KvDtype",
    "ModelArchitecture",
    "RuntimeOverhead",
    "check_fit",
    "find_architecture",
    "gpu_for",
    "kv_bytes",
    "kv_bytes_per_gpu",
    "kv_bytes_per_token_per_layer",
    "kv_heads_per_gpu",
    "kv_token_layers",
    "parse_kv_dtype",
    "round_up",
]
