"""The simulated engine: real token ids, a GPU-calibrated clock (``tandem.perf``)."""

from collections.abc import Mapping

from tandem.engines.simulated.config import (
    SimulatedConfig,
    SimulatedConfigError,
    SimulatedOptions,
    render_simulated_options,
)
from tandem.engines.simulated.engine import SimulatedEngine

__all__ = [
    "SimulatedConfig",
    "SimulatedConfigError",
    "SimulatedEngine",
    "SimulatedOptions",
    "create_engine",
    "render_simulated_options",
]


def create_engine(options: Mapping[str, object]) -> SimulatedEngine:
    """Entry point for ``tandem.engines.registry.make_engine("simulated", ...)``."""
    return SimulatedEngine.from_options(options)
