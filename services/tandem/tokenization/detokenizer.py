"""Incremental detokenization for vocabularies whose tokens are byte strings."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable


class StreamDetokenizer:
    """Streams text from token ids, holding back incomplete UTF-8 sequences.

    ``token_bytes`` maps an ordinary token to its bytes and returns ``None`` for a
    special token; ``special_text`` maps a special token to the text it renders as, or
    ``None`` to drop it. A rendered special token ends any pending byte sequence first,
    exactly as whole-sequence decoding splits the byte stream at visible special tokens.
    """

    __slots__ = ("_decoder", "_special_text", "_token_bytes")

    def __init__(
        self,
        *,
        token_bytes: Callable[[int], bytes | None],
        special_text: Callable[[int], str | None],
    ) -> None:
        self._token_bytes = token_bytes
        self._special_text = special_text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        data = self._token_bytes(token_id)
        if data is not None:
            return self._decoder.decode(data)
        text = self._special_text(token_id)
        return "" if text is None else self.flush() + text

    def push_many(self, token_ids: Iterable[int]) -> str:
        return "".join(self.push(token_id) for token_id in token_ids)

    def flush(self) -> str:
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text
