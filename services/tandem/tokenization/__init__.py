"""Tokenizers: text <-> token ids, chat templating, streaming detokenization."""

from tandem.tokenization.byte_tokenizer import SPECIAL_TOKENS, ByteTokenizer
from tandem.tokenization.detokenizer import StreamDetokenizer
from tandem.tokenization.protocol import (
    ChatMessage,
    IncrementalDetokenizer,
    TokenizationError,
    Tokenizer,
)

__all__ = [
    "SPECIAL_TOKENS",
    "ByteTokenizer",
    "ChatMessage",
    "IncrementalDetokenizer",
    "StreamDetokenizer",
    "TokenizationError",
    "Tokenizer",
]
