"""A fake ``tensorrt_llm`` mirroring the slice of TensorRT-LLM 1.2.1 Tandem uses.

TensorRT-LLM only runs on NVIDIA GPUs from NVIDIA's release images, so contract tests
put this package first on ``sys.path``. Every class and function names the file of the
real package it mirrors (paths inside github.com/NVIDIA/TensorRT-LLM) and keeps its
signature, written from TensorRT-LLM's own source, never from Tandem's code
(llmapi/llm_args.py says which versions were read, and why not exactly v1.2.1).
Behaviour is simulated in-process (``_fabric.py``): a deterministic toy model, and a
"cache transceiver" that hands KV from context-only to generation-only requests by
context request id, failing the way the real one fails when misconfigured (buffer
smaller than the prompt, overlap scheduler on a context worker, mismatched transceiver
backends).

Top-level exports as in tensorrt_llm/__init__.py (v1.2.1): ``LLM``, ``SamplingParams``,
``DisaggregatedParams``, ``__version__``.
"""

from tensorrt_llm.disaggregated_params import DisaggregatedParams
from tensorrt_llm.llmapi.llm import LLM
from tensorrt_llm.sampling_params import SamplingParams
from tensorrt_llm.version import __version__

__all__ = ["LLM", "DisaggregatedParams", "SamplingParams", "__version__"]
