"""A byte-level tokenizer with harmony-style chat markers.

Ids 0-255 are raw UTF-8 bytes; special tokens follow. Chat turns render as::

    <|startoftext|><|start|>{role}<|message|>{content}<|end|>...<|start|>assistant<|message|>

Because ``encode`` only ever yields byte tokens, a message whose text contains
``"<|end|>"`` stays plain bytes and cannot close its turn early: the template is
unambiguous.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from tandem.tokenization.chat_output import PlainChatOutput
from tandem.tokenization.detokenizer import StreamDetokenizer
from tandem.tokenization.protocol import ChatMessage, TokenizationError, replace_lone_surrogates

NUM_BYTE_TOKENS = 256

BOS = "<|startoftext|>"
END_OF_TEXT = "<|endoftext|>"
START = "<|start|>"
MESSAGE = "<|message|>"
END = "<|end|>"
RETURN = "<|return|>"

# Order fixes the ids (256, 257, ...); append only, never reorder.
SPECIAL_TOKENS: tuple[str, ...] = (BOS, END_OF_TEXT, START, MESSAGE, END, RETURN)

# Roles are short lowercase words so a rendered transcript reads like harmony's.
_ROLE_PATTERN = re.compile(r"[a-z][a-z0-9_\-]{0,31}")


class ByteTokenizer:
    """Deterministic, dependency-free tokenizer implementing ``Tokenizer``."""

    def __init__(self) -> None:
        self._special_ids: Mapping[str, int] = MappingProxyType(
            {text: NUM_BYTE_TOKENS + index for index, text in enumerate(SPECIAL_TOKENS)}
        )
        self._special_names: dict[int, str] = {v: k for k, v in self._special_ids.items()}

    @property
    def name(self) -> str:
        return "tandem-byte"

    @property
    def vocab_size(self) -> int:
        return NUM_BYTE_TOKENS + len(SPECIAL_TOKENS)

    @property
    def bos_token_id(self) -> int:
        return self._special_ids[BOS]

    @property
    def eos_token_id(self) -> int:
        return self._special_ids[END]

    @property
    def special_tokens(self) -> Mapping[str, int]:
        return self._special_ids

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return (self._special_ids[END], self._special_ids[RETURN], self._special_ids[END_OF_TEXT])

    def content_digest(self) -> str:
        return hashlib.sha256("\x00".join((self.name, *SPECIAL_TOKENS)).encode()).hexdigest()

    def token_id(self, special: str) -> int:
        """The id of a special token given its text, e.g. ``token_id("<|end|>")``."""
        try:
            return self._special_ids[special]
        except KeyError:
            raise TokenizationError(f"unknown special token {special!r}") from None

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_names

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """UTF-8 bytes of ``text``; lone surrogates (valid in JSON, not in UTF-8) become
        U+FFFD rather than failing the request."""
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError:
            encoded = replace_lone_surrogates(text).encode("utf-8")
        ids = list(encoded)
        return [self.bos_token_id, *ids] if add_bos else ids

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        pieces: list[str] = []
        pending = bytearray()
        for token_id in token_ids:
            if 0 <= token_id < NUM_BYTE_TOKENS:
                pending.append(token_id)
                continue
            name = self._special_name(token_id)
            if skip_special_tokens:
                continue
            pieces.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            pieces.append(name)
        pieces.append(pending.decode("utf-8", errors="replace"))
        return "".join(pieces)

    def detokenizer(self, *, skip_special_tokens: bool = True) -> StreamDetokenizer:
        def special_text(token_id: int) -> str | None:
            name = self._special_name(token_id)
            return None if skip_special_tokens else name

        return StreamDetokenizer(token_bytes=_byte_of, special_text=special_text)

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True
    ) -> list[int]:
        start, message, end = (
            self._special_ids[START],
            self._special_ids[MESSAGE],
            self.eos_token_id,
        )
        ids = [self.bos_token_id]
        for chat_message in messages:
            ids.append(start)
            ids.extend(self.encode(_checked_role(chat_message.role)))
            ids.append(message)
            ids.extend(self.encode(chat_message.content))
            ids.append(end)
        if add_generation_prompt:
            ids.append(start)
            ids.extend(self.encode("assistant"))
            ids.append(message)
        return ids

    def chat_output(self) -> PlainChatOutput:
        return PlainChatOutput(self.detokenizer())

    def _special_name(self, token_id: int) -> str:
        try:
            return self._special_names[token_id]
        except KeyError:
            raise TokenizationError(
                f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})"
            ) from None


def _byte_of(token_id: int) -> bytes | None:
    return bytes((token_id,)) if 0 <= token_id < NUM_BYTE_TOKENS else None


def _checked_role(role: str) -> str:
    if not _ROLE_PATTERN.fullmatch(role):
        raise TokenizationError(
            f"chat role {role!r} is invalid: use 1-32 lowercase letters, digits, '_' or '-'"
        )
    return role
