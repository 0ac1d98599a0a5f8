"""Which tokenizer a model uses -- decided once, from the InferenceCluster spec, by the
frontend and by every worker alike -- and proof that two processes hold the same one.

The rule (``tokenizer_kind``; the spec's CEL rules say the same, so ``tandem validate``
and the API server refuse what it cannot decide):

1. ``model.tokenizer`` when set;
2. ``gguf`` when ``model.source`` is a ``.gguf`` file (its tokenizer is inside);
3. ``harmony`` when ``model.name`` contains ``gpt-oss``;
4. ``byte`` for the reference engine's random model (tests, and nothing else).

``fingerprint`` names a loaded tokenizer by what decides ids: vocabulary size, EOS and
stop ids and a digest of its contents. Workers publish theirs in Health; a router whose
frontend holds another one refuses to route to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.api.v1alpha1 import EngineKind, ModelSpec, TokenizerKind
from tandem.models.source import resolve_local_model_file
from tandem.tokenization.byte_tokenizer import ByteTokenizer
from tandem.tokenization.protocol import TokenizationError, Tokenizer

GPT_OSS_MARKER = "gpt-oss"


class TokenizerChoiceError(TokenizationError):
    """The spec does not say which tokenizer to use; the message names the field."""


@dataclass(frozen=True, slots=True)
class TokenizerChoice:
    kind: TokenizerKind
    source: str | None = None  # the model file holding the tokenizer (gguf)

    def describe(self) -> str:
        return self.kind.value if self.source is None else f"{self.kind.value} ({self.source})"


def tokenizer_kind(model: ModelSpec, engine: EngineKind) -> TokenizerKind:
    """The tokenizer ``model`` uses under ``engine`` (pure; see the module docstring)."""
    if model.tokenizer is not None:
        kind = model.tokenizer
    elif model.source is not None and model.source.endswith(".gguf"):
        kind = TokenizerKind.GGUF
    elif GPT_OSS_MARKER in model.name:
        kind = TokenizerKind.HARMONY
    elif engine is EngineKind.REFERENCE:
        kind = TokenizerKind.BYTE
    else:
        raise TokenizerChoiceError(
            f"model.tokenizer: cannot tell which tokenizer {model.name!r} uses; set "
            "model.tokenizer (gguf for a .gguf model.source, harmony for gpt-oss)"
        )
    if kind is TokenizerKind.BYTE and engine is not EngineKind.REFERENCE:
        raise TokenizerChoiceError(
            "model.tokenizer: byte is the reference engine's test vocabulary only"
        )
    if kind is TokenizerKind.GGUF and not (model.source or "").endswith(".gguf"):
        raise TokenizerChoiceError(
            "model.tokenizer: gguf reads the tokenizer inside the model file, but "
            f"model.source {model.source!r} is not a .gguf file"
        )
    return kind


def choose_tokenizer(model: ModelSpec, engine: EngineKind) -> TokenizerChoice:
    kind = tokenizer_kind(model, engine)
    return TokenizerChoice(kind, model.source if kind is TokenizerKind.GGUF else None)


def load_tokenizer(choice: TokenizerChoice) -> Tokenizer:
    """Build the chosen tokenizer from local files (ModelSourceError / TokenizationError
    with an actionable message when something is missing)."""
    if choice.kind is TokenizerKind.BYTE:
        return ByteTokenizer()
    if choice.kind is TokenizerKind.HARMONY:
        from tandem.tokenization.harmony import load_harmony_tokenizer

        return load_harmony_tokenizer()
    from tandem.tokenization.gguf_tokenizer import load_gguf_tokenizer

    assert choice.source is not None  # choose_tokenizer guarantees it for gguf
    return load_gguf_tokenizer(resolve_local_model_file(choice.source))


def fingerprint(tokenizer: Tokenizer) -> str:
    """What two processes compare to agree on ids, e.g.
    ``v49152-eos2-stops0.2-86edb01eca9e6647``."""
    stops = ".".join(str(t) for t in sorted(tokenizer.stop_token_ids))
    return (
        f"v{tokenizer.vocab_size}-eos{tokenizer.eos_token_id}-stops{stops}-"
        f"{tokenizer.content_digest()[:16]}"
    )
