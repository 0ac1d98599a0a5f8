"""Mirrors tensorrt_llm/disaggregated_params.py, as stored in the code index at commit
01009a33a704c61e2c183c40514d7fb59159ab09 (release/1.2 era).

A kw-only dataclass; ``request_type`` is lower-cased and must be one of
context_only | generation_only | context_and_generation (``__post_init__``). The field
list is the P-D part of the v1.2-era dataclass; multimodal fields are left out because
the fake has no multimodal models.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

REQUEST_TYPES = ("context_only", "generation_only", "context_and_generation")


class DisaggScheduleStyle(IntEnum):
    """Mirrors tensorrt_llm/disaggregated_params.py DisaggScheduleStyle."""

    CONTEXT_FIRST = 0
    GENERATION_FIRST = 1


@dataclass(slots=True, kw_only=True)
class DisaggregatedParams:
    request_type: str | None = None
    first_gen_tokens: list[int] | None = None
    first_gen_log_probs: list[object] | None = None
    first_gen_logits: list[object] | None = None
    ctx_request_id: int | None = None
    opaque_state: bytes | None = None
    draft_tokens: list[int] | None = None
    disagg_request_id: int | None = None
    ctx_dp_rank: int | None = None
    ctx_info_endpoint: str | None = None
    schedule_style: DisaggScheduleStyle | None = None

    def __post_init__(self) -> None:
        if self.request_type is not None:
            self.request_type = self.request_type.lower()
            if self.request_type not in REQUEST_TYPES:
                raise ValueError(
                    f"Unknown request type: {self.request_type}. Must be context_only, "
                    "generation_only or context_and_generation"
                )
