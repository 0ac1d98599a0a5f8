"""The CPU reference engine: a transformer in numpy, either a llama-architecture model
from a GGUF file (SmolLM2) or a random gpt-oss-shaped one."""

from collections.abc import Mapping

from tandem.engines.reference.config import ReferenceConfigError, ReferenceModelConfig
from tandem.engines.reference.engine import ReferenceEngine
from tandem.engines.reference.kv_layout import compute_kv_bytes

__all__ = [
    "ReferenceConfigError",
    "ReferenceEngine",
    "ReferenceModelConfig",
    "compute_kv_bytes",
    "create_engine",
]


def create_engine(
    options: Mapping[str, object], model_source: str | None = None
) -> ReferenceEngine:
    """Entry point for ``tandem.engines.registry.make_engine("reference", ...)``: GGUF
    weights when ``model_source`` names a .gguf file, random ones when it is None."""
    return ReferenceEngine.from_options(options, model_source)
