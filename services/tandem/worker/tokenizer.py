"""The worker's tokenizer: the one the cluster's model spec selects (as the frontend
selects it), checked against the engine at startup and published in Health.

A worker does not tokenize requests (the frontend sends ids), but its ids must mean
what the frontend's mean: the engine's vocabulary must be exactly the tokenizer's, and
the engine's end-of-sequence id one of the tokenizer's stop ids. Anything else would
turn prompts into the wrong tokens or answers into garbage, so the worker refuses to
start, naming both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.api.v1alpha1 import EngineKind, ModelSpec, TokenizerKind
from tandem.engines.base import EngineError, EngineInfo
from tandem.tokenization import Tokenizer
from tandem.tokenization.selection import TokenizerChoice, choose_tokenizer

# Without a model spec: the reference engine's random model speaks bytes, and the trtllm
# engine serves gpt-oss only (the spec's CEL rules say so too).
_DEFAULT_KIND = {
    EngineKind.REFERENCE: TokenizerKind.BYTE,
    EngineKind.SIMULATED: TokenizerKind.HARMONY,
    EngineKind.TRTLLM: TokenizerKind.HARMONY,
}


class TokenizerMismatchError(EngineError):
    """The engine and the tokenizer disagree about ids; the message shows both."""


def tokenizer_choice(
    kind: str | None,
    source: str | None,
    model: Mapping[str, Any] | None,
    engine: str,
    model_source: str | None = None,
) -> TokenizerChoice:
    """Flags win over the model in the worker document, which wins over the engine's
    default (pure). ``model_source`` (the --model-source flag) replaces the document's
    model.source, so a worker given a .gguf file on the command line speaks its
    tokenizer as the engine does. Raises ValueError with the field at fault."""
    if kind is not None:
        return TokenizerChoice(TokenizerKind(kind), source)
    engine_kind = EngineKind(engine)
    if model_source is not None:
        model = {**(model or {"name": model_source}), "source": model_source}
    if model is not None:
        return choose_tokenizer(ModelSpec.model_validate(model), engine_kind)
    return TokenizerChoice(_DEFAULT_KIND[engine_kind])


def check_engine_tokenizer(info: EngineInfo, tokenizer: Tokenizer, choice: TokenizerChoice) -> None:
    """Raise TokenizerMismatchError unless ``info`` and ``tokenizer`` agree on ids."""
    problems = []
    if info.vocab_size != tokenizer.vocab_size:
        problems.append(
            f"the engine's vocabulary has {info.vocab_size} ids, the tokenizer's "
            f"{tokenizer.vocab_size}"
        )
    if info.eos_token_id not in tokenizer.stop_token_ids:
        problems.append(
            f"the engine ends sequences with id {info.eos_token_id}, which is not one of the "
            f"tokenizer's stop ids {list(tokenizer.stop_token_ids)}"
        )
    if problems:
        raise TokenizerMismatchError(
            f"model {info.model_name!r} does not match tokenizer {choice.describe()}: "
            + "; ".join(problems)
            + " (set the engine's vocab_size / eos_token_id options to the tokenizer's, "
            "or model.tokenizer to the model's own)"
        )
