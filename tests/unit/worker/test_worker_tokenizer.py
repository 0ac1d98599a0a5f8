"""The worker's tokenizer: chosen as the frontend chooses it, refused at startup when
the engine's ids are not the tokenizer's, published in Health."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tandem.api.v1alpha1 import TokenizerKind
from tandem.engines.base import EngineInfo
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.models.catalog import SMOLLM2_SOURCE
from tandem.tokenization import ByteTokenizer
from tandem.tokenization.selection import TokenizerChoice, load_tokenizer
from tandem.worker.tokenizer import (
    TokenizerMismatchError,
    check_engine_tokenizer,
    tokenizer_choice,
)

BYTE = TokenizerChoice(TokenizerKind.BYTE)
HARMONY = TokenizerChoice(TokenizerKind.HARMONY)


def test_flags_win_over_the_document_which_wins_over_the_engine_default() -> None:
    gguf_model = {"name": "smollm2", "source": SMOLLM2_SOURCE}
    assert tokenizer_choice("harmony", None, gguf_model, "reference") == HARMONY
    assert tokenizer_choice(None, None, gguf_model, "reference") == TokenizerChoice(
        TokenizerKind.GGUF, SMOLLM2_SOURCE
    )
    assert tokenizer_choice(None, None, None, "reference") == BYTE
    assert tokenizer_choice(None, None, None, "trtllm") == HARMONY


def test_a_model_source_flag_brings_its_own_tokenizer() -> None:
    gguf = TokenizerChoice(TokenizerKind.GGUF, SMOLLM2_SOURCE)
    assert tokenizer_choice(None, None, None, "reference", SMOLLM2_SOURCE) == gguf
    # It replaces the document's source, and the document's name still counts.
    document = {"name": "openai/gpt-oss-20b", "source": "/models/gpt-oss-20b"}
    assert tokenizer_choice(None, None, document, "reference", SMOLLM2_SOURCE) == gguf
    assert tokenizer_choice(None, None, document, "trtllm", "/other/dir") == HARMONY
    assert tokenizer_choice(None, None, None, "reference", "/weights/random") == BYTE


def _info(vocab_size: int, eos: int) -> EngineInfo:
    return EngineInfo("m", vocab_size, 4096, 16, eos)


def test_the_reference_models_agree_with_their_tokenizers() -> None:
    default = ReferenceModelConfig()
    check_engine_tokenizer(_info(default.vocab_size, default.eos_token_id), ByteTokenizer(), BYTE)
    check_engine_tokenizer(_info(201_088, 200_002), load_tokenizer(HARMONY), HARMONY)


def test_a_mismatch_names_both_sides() -> None:
    with pytest.raises(TokenizerMismatchError) as caught:
        check_engine_tokenizer(_info(262, 260), load_tokenizer(HARMONY), HARMONY)
    message = str(caught.value)
    assert "vocabulary has 262 ids, the tokenizer's 201088" in message
    assert "id 260, which is not one of the tokenizer's stop ids" in message
    assert "vocab_size / eos_token_id" in message


def test_the_worker_process_refuses_to_start_with_one_clear_line() -> None:
    """The default reference engine (byte vocabulary) told to use harmony's."""
    done = subprocess.run(
        [sys.executable, "-m", "tandem.worker", "--role", "both", "--tokenizer", "harmony",
         "--kv-backend", "tcp", "--engine-options", '{"num_layers": 1, "hidden": 32, '
         '"num_heads": 2, "num_kv_heads": 1, "head_dim": 16, "intermediate": 32}'],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "cannot start its engine" in done.stderr
    assert "does not match tokenizer harmony" in done.stderr
    assert "Traceback" not in done.stderr
