"""What a chat model's generated tokens mean: answer text and, for reasoning models,
the reasoning that precedes it (OpenAI-compatible servers return it as
``reasoning_content``).

Each tokenizer gives its model's parser (``Tokenizer.chat_output()``): plain models
produce only content; gpt-oss writes harmony messages whose ``analysis`` channel is
reasoning and whose ``final`` channel is the answer (``tandem.tokenization.harmony``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.tokenization.protocol import ChatDelta, IncrementalDetokenizer


class PlainChatOutput:
    """Every generated token is answer text (special tokens are not shown)."""

    __slots__ = ("_detokenizer",)

    def __init__(self, detokenizer: IncrementalDetokenizer) -> None:
        self._detokenizer = detokenizer

    def push_many(self, token_ids: Sequence[int]) -> ChatDelta:
        return ChatDelta(content=self._detokenizer.push_many(token_ids))

    def finish(self) -> ChatDelta:
        return ChatDelta(content=self._detokenizer.flush())
