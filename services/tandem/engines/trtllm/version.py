"""The TensorRT-LLM release this adapter is written against.

1.2.1 is the current stable release (April 2026): NVIDIA's release image
``nvcr.io/nvidia/tensorrt-llm/release:1.2.1`` carries it, and NVIDIA's pip index serves
``tensorrt-llm==1.2.1`` (the PyPI package is a placeholder that fetches from there).

Where each signature we rely on was read (all paths relative to the TensorRT-LLM repo):

* ``tensorrt_llm/llmapi/llm_args.py`` at v1.2.1 — field names, defaults and enums of
  ``TorchLlmArgs`` / ``BaseLlmArgs``, ``KvCacheConfig`` (``tokens_per_block`` default 32,
  ``free_gpu_memory_fraction`` 0.9, ``dtype`` "auto"), ``CacheTransceiverConfig``
  (``backend`` in DEFAULT|UCX|NIXL|MOONCAKE|MPI, ``max_tokens_in_buffer``,
  ``kv_transfer_timeout_ms``), ``MoeConfig.backend`` (CUTLASS default; CUTEDSL, WIDEEP,
  TRTLLM, DEEPGEMM, VANILLA, TRITON), ``EagleDecodingConfig`` (``decoding_type``
  "Eagle"; Eagle-3 via ``eagle3_one_model``). Read from a field-by-field catalogue of the
  unpacked v1.2.1 wheel (henrycgbaker/LLenergyMeasure,
  ``research/mining-substrate-trial/findings/ground_truth/tensorrt/v1_2_1/``), which cites
  the line of every field.
* ``tensorrt_llm/llmapi/llm.py`` — ``LLM(model, ..., **kwargs)``,
  ``LLM.generate_async(inputs, sampling_params=None, ..., streaming=False, ...,
  disaggregated_params=None)`` returning a ``RequestOutput``, ``LLM.get_stats_async(timeout)``
  yielding iteration-stats dicts, ``LLM.shutdown()``. Same signatures in the 1.2.0rc2.post2
  and 1.3.0rc docs that bracket 1.2.1 (nvidia.github.io/TensorRT-LLM/<version>/).
* ``tensorrt_llm/executor/result.py`` — ``CompletionOutput`` (``token_ids``,
  ``finish_reason`` in stop|length|timeout|cancelled, ``disaggregated_params``),
  ``GenerationResult.abort()``, async iteration / ``aresult()``.
* ``tensorrt_llm/disaggregated_params.py`` — ``DisaggregatedParams`` (kw-only dataclass:
  ``request_type`` context_only|generation_only|context_and_generation,
  ``first_gen_tokens``, ``ctx_request_id``, ``opaque_state: bytes``, ``draft_tokens``,
  ``disagg_request_id``, ``ctx_dp_rank``, ``ctx_info_endpoint``, ...).
* ``tests/integration/defs/disaggregated/test_disaggregated_single_gpu.py`` — the
  handoff protocol: the context-only output has exactly one token and
  ``outputs[0].disaggregated_params``; flipping its ``request_type`` to
  ``"generation_only"`` and submitting the same prompt on the decode instance yields the
  full output *including* that first token; ``RequestOutput.abort()`` cancels.
"""

from __future__ import annotations

PINNED_VERSION = "1.2.1"
RELEASE_IMAGE = f"nvcr.io/nvidia/tensorrt-llm/release:{PINNED_VERSION}"


def release_of(version: str) -> tuple[int, int, int] | None:
    """``"1.2.1.post1"`` -> ``(1, 2, 1)``; None when the string has no x.y.z prefix."""
    parts = version.split(".")
    if len(parts) < 3:
        return None
    numbers: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            return None
        numbers.append(int(digits))
    return numbers[0], numbers[1], numbers[2]


def is_pinned_release(version: str) -> bool:
    """True for 1.2.1 and its post releases; 1.2.1rc/other versions are not the pin."""
    base = release_of(version)
    if base != release_of(PINNED_VERSION):
        return False
    third = version.split(".")[2]
    return third.isdigit()
