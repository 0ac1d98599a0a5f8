"""The tokenizer a GGUF model file carries (``tokenizer.ggml.*`` and
``tokenizer.chat_template`` metadata), read with the ``gguf`` package (llama.cpp's reader).

Only the metadata is used here; the weights are the engine's business. Every way a file
can be unusable -- not GGUF, truncated, no tokenizer, a tokenizer kind we do not build --
is a :class:`GgufTokenizerError` naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.tokenization.protocol import TokenizationError

# gguf.TokenType values (llama.cpp's llama_token_type).
TOKEN_NORMAL = 1
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4


class GgufTokenizerError(TokenizationError):
    """The model file has no tokenizer Tandem can build; the message names file and key."""


@dataclass(frozen=True, slots=True)
class GgufVocabulary:
    """The tokenizer metadata of one GGUF file (token id = index in ``tokens``)."""

    path: Path
    model: str  # tokenizer.ggml.model: "gpt2" is byte-level BPE
    pre: str  # tokenizer.ggml.pre: llama.cpp's pre-tokenizer name
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_token_id: int
    eos_token_id: int
    # llama.cpp's other end-of-generation ids, when the file names them.
    eot_token_id: int | None = None
    eom_token_id: int | None = None
    add_bos_token: bool = False
    chat_template: str | None = None


def read_gguf_vocabulary(path: str | Path) -> GgufVocabulary:
    """The tokenizer metadata of the GGUF file at ``path``."""
    path = Path(path)
    fields = _read_fields(path)

    def get(key: str, required: bool = True) -> Any:
        field = fields.get(key)
        if field is None:
            if required:
                raise GgufTokenizerError(f"{path}: GGUF metadata has no {key}")
            return None
        try:
            return field.contents()
        except (ValueError, IndexError, UnicodeDecodeError) as error:
            raise GgufTokenizerError(
                f"{path}: GGUF metadata {key} is unreadable: {error}"
            ) from None

    tokens = tuple(get("tokenizer.ggml.tokens"))
    vocab = GgufVocabulary(
        path=path,
        model=str(get("tokenizer.ggml.model")),
        pre=str(get("tokenizer.ggml.pre", required=False) or "default"),
        tokens=tokens,
        token_types=tuple(int(t) for t in get("tokenizer.ggml.token_type", required=False) or ()),
        merges=tuple(get("tokenizer.ggml.merges", required=False) or ()),
        bos_token_id=int(get("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(get("tokenizer.ggml.eos_token_id")),
        eot_token_id=_optional_int(get("tokenizer.ggml.eot_token_id", required=False)),
        eom_token_id=_optional_int(get("tokenizer.ggml.eom_token_id", required=False)),
        add_bos_token=bool(get("tokenizer.ggml.add_bos_token", required=False)),
        chat_template=get("tokenizer.chat_template", required=False),
    )
    _check(vocab)
    return vocab


def _read_fields(path: Path) -> dict[str, Any]:
    import gguf  # imported here: only GGUF models need it

    if not path.is_file():
        raise GgufTokenizerError(f"{path}: no such model file")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as error:  # gguf raises ValueError, struct/numpy errors on bad bytes
        raise GgufTokenizerError(
            f"{path}: not a readable GGUF file ({type(error).__name__}: {error})"
        ) from None
    return dict(reader.fields)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _check(vocab: GgufVocabulary) -> None:
    path, size = vocab.path, len(vocab.tokens)
    if not size:
        raise GgufTokenizerError(f"{path}: tokenizer.ggml.tokens is empty")
    if vocab.token_types and len(vocab.token_types) != size:
        raise GgufTokenizerError(
            f"{path}: tokenizer.ggml.token_type has {len(vocab.token_types)} entries for "
            f"{size} tokens"
        )
    named = {
        "bos_token_id": vocab.bos_token_id,
        "eos_token_id": vocab.eos_token_id,
        "eot_token_id": vocab.eot_token_id,
        "eom_token_id": vocab.eom_token_id,
    }
    for key, token_id in named.items():
        if token_id is not None and not 0 <= token_id < size:
            raise GgufTokenizerError(
                f"{path}: tokenizer.ggml.{key} {token_id} is outside the {size}-token vocabulary"
            )
