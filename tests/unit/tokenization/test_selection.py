"""The tokenizer rule: one decision from the spec, the same in Python (frontend, workers,
``tandem up``) and in the CRD's CEL rules (``tandem validate``, the API server)."""

from __future__ import annotations

import itertools

import pytest

from tandem.api.v1alpha1 import EngineKind, ModelSpec, TokenizerKind
from tandem.api.validate import ManifestError, parse_object
from tandem.models.catalog import SMOLLM2_SOURCE
from tandem.tokenization import ByteTokenizer
from tandem.tokenization.selection import (
    TokenizerChoice,
    TokenizerChoiceError,
    choose_tokenizer,
    fingerprint,
    load_tokenizer,
    tokenizer_kind,
)

REF, TRT = EngineKind.REFERENCE, EngineKind.TRTLLM


@pytest.mark.parametrize(
    ("model", "engine", "kind"),
    [
        ({"name": "smollm2", "source": SMOLLM2_SOURCE}, REF, TokenizerKind.GGUF),
        ({"name": "openai/gpt-oss-120b"}, TRT, TokenizerKind.HARMONY),
        ({"name": "openai/gpt-oss-20b", "source": "pvc://models/gpt-oss-20b"}, TRT, "harmony"),
        ({"name": "tandem/reference-tiny"}, REF, TokenizerKind.BYTE),
        # The random gpt-oss-shaped reference model with the real vocabulary.
        ({"name": "tandem/reference-gpt-oss", "tokenizer": "harmony"}, REF, "harmony"),
        ({"name": "x", "source": "/m/x.gguf", "tokenizer": "byte"}, REF, TokenizerKind.BYTE),
    ],
)
def test_the_rule(model: dict[str, str], engine: EngineKind, kind: str) -> None:
    assert tokenizer_kind(ModelSpec.model_validate(model), engine) == kind


@pytest.mark.parametrize(
    ("model", "engine", "message"),
    [
        ({"name": "meta/llama"}, TRT, "set model.tokenizer"),
        ({"name": "x", "tokenizer": "byte"}, TRT, "reference engine's test vocabulary"),
        ({"name": "x", "tokenizer": "gguf", "source": "hf://org/x"}, REF, "not a .gguf file"),
    ],
)
def test_undecidable_specs_name_the_field(
    model: dict[str, str], engine: EngineKind, message: str
) -> None:
    with pytest.raises(TokenizerChoiceError, match=message) as caught:
        tokenizer_kind(ModelSpec.model_validate(model), engine)
    assert str(caught.value).startswith("model.tokenizer")


def _cel_refuses_the_tokenizer(model: dict[str, object], engine: EngineKind) -> bool:
    doc = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "c"},
        "spec": {
            "model": model,
            "engine": {"kind": engine.value},
            "accelerator": {"profile": "h100" if engine is TRT else "cpu"},
        },
    }
    try:
        parse_object(doc)
    except ManifestError as exc:
        return any("tokenizer" in error.path for error in exc.errors)
    return False


def test_cel_and_python_decide_alike() -> None:
    """Every combination of the fields the rule reads: the CRD refuses exactly what the
    Python rule cannot decide (and, for the GPU engines, anything but harmony)."""
    tokenizers = [None, *TokenizerKind]
    sources = [None, "pkg://m/model.gguf", "hf://openai/gpt-oss-20b"]
    names = ["openai/gpt-oss-20b", "org/other"]
    for tokenizer, source, name, engine in itertools.product(
        tokenizers, sources, names, EngineKind
    ):
        model = {"name": name, "source": source, "tokenizer": tokenizer}
        model = {k: v for k, v in model.items() if v is not None}
        try:
            kind = tokenizer_kind(ModelSpec.model_validate(model), engine)
            python_refuses = engine is not REF and kind is not TokenizerKind.HARMONY
        except TokenizerChoiceError:
            python_refuses = True
        assert _cel_refuses_the_tokenizer(model, engine) == python_refuses, (model, engine)


def test_fingerprints_tell_tokenizers_apart() -> None:
    byte = fingerprint(ByteTokenizer())
    assert byte == fingerprint(load_tokenizer(TokenizerChoice(TokenizerKind.BYTE)))
    assert byte.startswith("v262-eos260-stops257.260.261-")
    harmony = fingerprint(load_tokenizer(TokenizerChoice(TokenizerKind.HARMONY)))
    assert harmony.startswith("v201088-eos200002-")
    smollm = load_tokenizer(choose_tokenizer(ModelSpec(name="smollm2", source=SMOLLM2_SOURCE), REF))
    assert fingerprint(smollm).startswith("v49152-eos2-stops0.2-")
    assert len({byte, harmony, fingerprint(smollm)}) == 3
