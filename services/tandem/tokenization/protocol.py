"""The tokenizer seam: what the frontend needs to turn text into token ids and back.

Implementations are deterministic and local (no downloads). Text passed to ``encode``
never produces special tokens, so user content cannot forge chat markers; special tokens
only come from ``apply_chat_template`` (or from the model).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class TokenizationError(ValueError):
    """Input the tokenizer cannot handle (unknown token id, invalid chat role)."""


def replace_lone_surrogates(text: str) -> str:
    """``text`` with lone surrogates (valid in JSON, not in UTF-8) as U+FFFD, so such a
    request is served rather than failed."""
    return _LONE_SURROGATE.sub("\ufffd", text)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


class IncrementalDetokenizer(Protocol):
    """Turns a stream of token ids into text for streaming responses.

    Never emits part of a character: bytes are held back until they complete a UTF-8
    sequence (or are proven invalid, which yields U+FFFD exactly as ``decode`` would).
    The concatenation of everything returned by ``push``/``push_many``/``flush`` equals
    ``decode`` of all ids pushed, however the ids were chunked.
    """

    def push(self, token_id: int) -> str: ...

    def push_many(self, token_ids: Iterable[int]) -> str: ...

    def flush(self) -> str:
        """End of stream: returns held-back bytes (as U+FFFD if they never completed)."""
        ...


@dataclass(frozen=True, slots=True)
class ChatDelta:
    content: str = ""
    reasoning: str = ""

    def __add__(self, other: ChatDelta) -> ChatDelta:
        return ChatDelta(self.content + other.content, self.reasoning + other.reasoning)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning)


class ChatOutputParser(Protocol):
    """Streams generated ids into deltas; concatenating every delta gives the same text
    however the ids were chunked."""

    def push_many(self, token_ids: Sequence[int]) -> ChatDelta: ...

    def finish(self) -> ChatDelta:
        """End of generation: whatever was held back."""
        ...


class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def bos_token_id(self) -> int: ...

    @property
    def eos_token_id(self) -> int: ...

    @property
    def special_tokens(self) -> Mapping[str, int]:
        """Special token text (e.g. ``"<|end|>"``) to id."""
        ...

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Ids that end a generation (pass them to the engine's SamplingParams)."""
        ...

    def is_special(self, token_id: int) -> bool: ...

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str: ...

    def detokenizer(self, *, skip_special_tokens: bool = True) -> IncrementalDetokenizer: ...

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True
    ) -> list[int]: ...

    def content_digest(self) -> str:
        """SHA-256 (hex) over everything that decides ids and chat prompts: two
        tokenizers with equal digests tokenize alike."""
        ...

    def chat_output(self) -> ChatOutputParser:
        """A parser for one chat response's generated ids (content vs reasoning)."""
        ...
