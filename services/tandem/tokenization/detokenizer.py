"""Incremental detokenization for byte-level vocabularies."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable


class ByteStreamDetokenizer:
    """Streams text from byte tokens, holding back incomplete UTF-8 sequences.

    ``special_text`` maps a non-byte token id to the text it renders as, or ``None`` to
    drop it. A rendered special token ends any pending byte sequence first, exactly as
    whole-sequence decoding splits the byte stream at visible special tokens.
    """

    def __init__(
        self,
        *,
        num_byte_tokens: int,
        special_text: Callable[[int], str | None],
    ) -> None:
        self._num_byte_tokens = num_byte_tokens
        self._special_text = special_text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        if 0 <= token_id < self._num_byte_tokens:
            return self._decoder.decode(bytes((token_id,)))
        text = self._special_text(token_id)
        if text is None:
            return ""
        return self.flush() + text

    def push_many(self, token_ids: Iterable[int]) -> str:
        return "".join(self.push(token_id) for token_id in token_ids)

    def flush(self) -> str:
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text
