"""The ``trtllm`` engine: TensorRT-LLM (pinned 1.2.1) behind Tandem's AsyncEngine seam.

Importing this package never imports ``tensorrt_llm``; the engine loads it in
``TrtllmEngine.start()`` and fails with a clear message where it is not installed.
``render_trtllm_config`` (pure) renders a pool's LLM API options from the spec.
"""

from tandem.engines.trtllm.config import (
    TrtllmConfigError,
    dump_llm_api_options,
    pool_engine_options,
    render_trtllm_config,
)
from tandem.engines.trtllm.engine import RequestAborted, TrtllmEngine, create_engine
from tandem.engines.trtllm.handoff import HandoffError, decode_handoff, encode_handoff
from tandem.engines.trtllm.options import TrtllmEngineOptions, TrtllmOptionsError
from tandem.engines.trtllm.version import PINNED_VERSION, RELEASE_IMAGE

__all__ = [
    "PINNED_VERSION",
    "RELEASE_IMAGE",
    "HandoffError",
    "RequestAborted",
    "TrtllmConfigError",
    "TrtllmEngine",
    "TrtllmEngineOptions",
    "TrtllmOptionsError",
    "create_engine",
    "decode_handoff",
    "dump_llm_api_options",
    "encode_handoff",
    "pool_engine_options",
    "render_trtllm_config",
]
