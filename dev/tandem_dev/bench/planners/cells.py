"""The grid both planners answer (pure): one cell is a model on a GPU, a workload and an
SLO at one request rate."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.perf.measured import MODELS, SYSTEMS

PROFILES = (AcceleratorProfile.GB200, AcceleratorProfile.B200, AcceleratorProfile.H200)
MODEL_NAMES = ("gpt-oss-120b", "gpt-oss-20b")
# (ISL, OSL, TTFT p90 target in s, two request rates): the rates put a deployment of a
# few GPUs under the larger model at the low one and four times that at the high one.
LENGTHS = (
    (1000, 1000, 0.5, (2.0, 8.0)),
    (8000, 1000, 1.0, (1.0, 4.0)),
    (32000, 1000, 2.0, (0.5, 2.0)),
)
TPOTS_MS = (6, 10, 20)
LONG_ISL = 32000  # where stalls and the Pareto curves are shown
STALL_BOUND_S = 0.030


@dataclass(frozen=True, slots=True)
class Cell:
    model: str  # Tandem's architecture name: gpt-oss-120b
    profile: AcceleratorProfile
    isl: int
    osl: int
    ttft_s: float
    tpot_ms: int
    rate: float

    @property
    def key(self) -> str:
        return (
            f"{self.model}/{self.profile.value}/{self.isl}-{self.osl}/tpot{self.tpot_ms}/"
            f"r{self.rate:g}"
        )

    @property
    def system(self) -> str:
        """AIConfigurator's name for the GPU."""
        return SYSTEMS[self.profile]

    @property
    def model_id(self) -> str:
        return MODELS[self.model]

    def describe(self) -> str:
        return (
            f"{self.model} {self.profile.value} {self.isl // 1000}k/{self.osl // 1000}k "
            f"TPOT {self.tpot_ms} ms {self.rate:g} req/s"
        )


def build_cells() -> list[Cell]:
    cells = []
    for model, profile, (isl, osl, ttft, rates), tpot in itertools.product(
        MODEL_NAMES, PROFILES, LENGTHS, TPOTS_MS
    ):
        cells += [Cell(model, profile, isl, osl, ttft, tpot, rate) for rate in rates]
    return cells
