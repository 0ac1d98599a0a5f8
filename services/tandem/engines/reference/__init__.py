"""The CPU reference engine: a small gpt-oss-shaped transformer in numpy."""

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


def create_engine(options: Mapping[str, object]) -> ReferenceEngine:
    """Entry point for ``tandem.engines.registry.make_engine("reference", options)``."""
    return ReferenceEngine.from_options(options)
