"""Mirrors tensorrt_llm/sampling_params.py ``SamplingParams`` (v1.2.1).

``@dataclass(slots=True, kw_only=True)``; the fields Tandem sets keep their 1.2.1 names
and defaults (max_tokens=32, end_id/top_k/top_p/temperature/seed/stop_token_ids=None,
detokenize=True); ``_validate`` checks the ranges 1.2.1 added in Python
(sampling_params.py:300-304): 0 <= top_p <= 1, top_k >= 0, temperature >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    stop_token_ids: list[int] | None = None
    n: int = 1
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    logprobs: int | None = None
    ignore_eos: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id
        self._validate()

    def _validate(self) -> None:
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError(f"require 0 <= top_p <= 1, got top_p={self.top_p}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"require top_k >= 0, got top_k={self.top_k}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"require temperature >= 0, got temperature={self.temperature}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
