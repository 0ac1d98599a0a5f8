"""gpt-oss responses: harmony messages -> reasoning and answer text.

openai-harmony's ``StreamableParser`` reads the generated ids as assistant messages
(``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>
...<|return|>``). Text of the ``analysis`` channel is reasoning (``reasoning_content``);
every other channel (``final``, and ``commentary`` preambles) is the answer.

A model is not obliged to write well-formed harmony (a random-weight test model never
does, a fine-tuned one may slip). It is not dropped: from the first id the parser
rejects on, including the header ids held since the last text, and for a whole response
that never reached a message body, the ids are decoded as plain answer text (special
tokens hidden). A header left open after some text is structure, not text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from tandem.tokenization.protocol import ChatDelta, IncrementalDetokenizer

REASONING_CHANNEL = "analysis"


class HarmonyChatOutput:
    __slots__ = ("_error", "_make_plain", "_parser", "_plain", "_shown_any", "_unshown")

    def __init__(
        self,
        encoding: Any,
        harmony: ModuleType,
        make_plain: Callable[[], IncrementalDetokenizer],
    ) -> None:
        self._parser = harmony.StreamableParser(encoding, role=harmony.Role.ASSISTANT)
        self._error: type[Exception] = harmony.HarmonyError
        self._make_plain = make_plain
        self._plain: IncrementalDetokenizer | None = None
        self._unshown: list[int] = []  # ids since the last message text (headers, so far)
        self._shown_any = False

    def push_many(self, token_ids: Sequence[int]) -> ChatDelta:
        content: list[str] = []
        reasoning: list[str] = []
        for token_id in token_ids:
            if self._plain is not None:
                content.append(self._plain.push(token_id))
                continue
            try:
                self._parser.process(token_id)
            except self._error:
                content.append(self._fall_back(token_id))
                continue
            delta = self._parser.last_content_delta
            if not delta:
                self._unshown.append(token_id)
                continue
            self._unshown.clear()
            self._shown_any = True
            channel = self._parser.current_channel
            (reasoning if channel == REASONING_CHANNEL else content).append(delta)
        return ChatDelta(content="".join(content), reasoning="".join(reasoning))

    def finish(self) -> ChatDelta:
        if self._plain is not None:
            return ChatDelta(content=self._plain.flush())
        with contextlib.suppress(self._error):  # ended inside a header: no text in it
            self._parser.process_eos()
        if self._shown_any or not self._unshown:
            return ChatDelta()
        plain = self._make_plain()
        return ChatDelta(content=plain.push_many(self._unshown) + plain.flush())

    def _fall_back(self, token_id: int) -> str:
        self._plain = self._make_plain()
        held, self._unshown = self._unshown, []
        return self._plain.push_many([*held, token_id])
