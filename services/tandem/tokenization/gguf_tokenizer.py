"""The ``Tokenizer`` of a GGUF model: its own vocabulary, merges, pre-tokenizer and chat
template, built with Hugging Face's ``tokenizers`` and rendered with jinja2.

``tokenizer.ggml.model == "gpt2"`` is GPT-2 style byte-level BPE: ``tokenizers``'
``models.BPE`` over the file's tokens and merges, a ``ByteLevel`` decoder, and the
pre-tokenizer llama.cpp names in ``tokenizer.ggml.pre``:

=========  =============================================================================
``gpt-2``  ``ByteLevel`` (GPT-2's split regex)
``smollm`` individual digits, then ``ByteLevel`` -- llama.cpp's ``\\p{N}`` split followed
           by the GPT-2 regex for its STARCODER/SMOLLM group (``llama-vocab.cpp``), and
           what SmolLM2's own ``tokenizer.json`` declares
=========  =============================================================================

Other files are refused with the key and value (their ids could not be checked here).

Control tokens (``tokenizer.ggml.token_type`` 3) are special: ``encode`` keeps their text
plain, so user text never becomes a chat marker; only the template's own text may hold
them. Generation stops at the file's EOS/EOT/EOM ids and at the control tokens llama.cpp
also treats as end-of-generation (``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``...).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from types import MappingProxyType

# One prompt is encoded per call and Tandem runs calls on its own threads: tokenizers'
# rayon pool would only spin beside them (measured: ~30% more CPU per request on two
# cores). Set before tokenizers is imported; an explicit setting wins.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HfTokenizer

from tandem.tokenization.chat_output import PlainChatOutput
from tandem.tokenization.chat_template import ChatTemplate
from tandem.tokenization.detokenizer import StreamDetokenizer
from tandem.tokenization.gguf_vocab import (
    TOKEN_CONTROL,
    TOKEN_USER_DEFINED,
    GgufTokenizerError,
    GgufVocabulary,
    read_gguf_vocabulary,
)
from tandem.tokenization.protocol import ChatMessage, TokenizationError, replace_lone_surrogates

# llama.cpp's end-of-generation token texts (llama-vocab.cpp, "find EOT token").
END_OF_GENERATION_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<|eom_id|>",
        "<EOT>",
    }
)

_PRE_TOKENIZERS = ("gpt-2", "smollm")


def build_hf_tokenizer(vocab: GgufVocabulary) -> HfTokenizer:
    """A ``tokenizers.Tokenizer`` equal to the file's tokenizer (pure)."""
    where = vocab.path
    if vocab.model != "gpt2":
        raise GgufTokenizerError(
            f"{where}: tokenizer.ggml.model {vocab.model!r} is not supported (Tandem builds "
            "byte-level BPE tokenizers, model 'gpt2')"
        )
    if vocab.pre not in _PRE_TOKENIZERS:
        raise GgufTokenizerError(
            f"{where}: tokenizer.ggml.pre {vocab.pre!r} is not supported (supported: "
            f"{', '.join(_PRE_TOKENIZERS)})"
        )
    if not vocab.merges:
        raise GgufTokenizerError(f"{where}: GGUF metadata has no tokenizer.ggml.merges")
    ids = {token: index for index, token in enumerate(vocab.tokens)}
    merges = []
    for line in vocab.merges:
        left, space, right = line.partition(" ")
        if not space or left not in ids or right not in ids:
            raise GgufTokenizerError(f"{where}: tokenizer.ggml.merges has a bad entry {line!r}")
        merges.append((left, right))
    tokenizer = HfTokenizer(models.BPE(vocab=ids, merges=merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if vocab.pre == "smollm"
        else byte_level
    )
    tokenizer.decoder = decoders.ByteLevel()
    added = [
        AddedToken(token, special=kind == TOKEN_CONTROL, normalized=False)
        for token, kind in zip(vocab.tokens, vocab.token_types, strict=True)
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]
    tokenizer.add_tokens(added)
    return tokenizer


@cache
def _byte_decoder() -> Mapping[str, int]:
    """GPT-2's byte <-> printable character table, inverted: printable Latin-1 bytes
    stand for themselves, the other 68 are shifted to U+0100 and up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    shifted = (b for b in range(256) if b not in set(printable))
    table.update({chr(0x100 + n): b for n, b in enumerate(shifted)})
    return MappingProxyType(table)


def _token_bytes(token: str) -> bytes:
    decoder = _byte_decoder()
    if all(c in decoder for c in token):
        return bytes(decoder[c] for c in token)
    return token.encode("utf-8")  # an added token written as plain text


class GgufTokenizer:
    """``Tokenizer`` over a GGUF file's own tokenizer (see the module docstring)."""

    def __init__(self, vocab: GgufVocabulary) -> None:
        self._vocab = vocab
        self._marked = build_hf_tokenizer(vocab)  # recognises special-token text
        self._plain = build_hf_tokenizer(vocab)  # never does: user text stays text
        self._plain.encode_special_tokens = True
        kinds = vocab.token_types or (1,) * len(vocab.tokens)
        specials = {
            token: index
            for index, (token, kind) in enumerate(zip(vocab.tokens, kinds, strict=True))
            if kind == TOKEN_CONTROL
        }
        self._specials: Mapping[str, int] = MappingProxyType(specials)
        self._special_names = {i: t for t, i in specials.items()}
        self._bytes: list[bytes | None] = [
            None if i in self._special_names else _token_bytes(t)
            for i, t in enumerate(vocab.tokens)
        ]
        named = (vocab.eos_token_id, vocab.eot_token_id, vocab.eom_token_id)
        by_text = (i for t, i in specials.items() if t in END_OF_GENERATION_TEXTS)
        self._stops = tuple(dict.fromkeys(i for i in (*named, *by_text) if i is not None))
        self._template = (
            None
            if vocab.chat_template is None
            else ChatTemplate(
                vocab.chat_template,
                {
                    "bos_token": vocab.tokens[vocab.bos_token_id],
                    "eos_token": vocab.tokens[vocab.eos_token_id],
                },
            )
        )
        self._name = f"gguf:{vocab.path.name}"

    @property
    def name(self) -> str:
        return self._name

    @property
    def vocab_size(self) -> int:
        return len(self._vocab.tokens)

    @property
    def bos_token_id(self) -> int:
        return self._vocab.bos_token_id

    @property
    def eos_token_id(self) -> int:
        return self._vocab.eos_token_id

    @property
    def special_tokens(self) -> Mapping[str, int]:
        return self._specials

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stops

    @property
    def hf_tokenizer(self) -> HfTokenizer:
        """The ``tokenizers`` object that recognises special-token text, as a
        ``tokenizer.json`` would load (for tools that take one, e.g. benchmarks)."""
        return self._marked

    @property
    def chat_template_source(self) -> str | None:
        """The file's chat template (Jinja source), for tools that render it themselves."""
        return self._vocab.chat_template

    def content_digest(self) -> str:
        """SHA-256 over everything that decides ids and the chat prompt."""
        digest = hashlib.sha256()
        vocab = self._vocab
        for part in (vocab.model, vocab.pre, vocab.chat_template or "", *vocab.tokens):
            digest.update(part.encode() + b"\x00")
        digest.update(b"\x01".join(m.encode() for m in vocab.merges))
        digest.update(bytes(str(vocab.token_types), "ascii"))
        return digest.hexdigest()

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_names

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Plain text to ids; ``add_bos`` prepends BOS only where the file asks for one
        (``tokenizer.ggml.add_bos_token``)."""
        ids = self._encode(self._plain, text)
        return [self.bos_token_id, *ids] if add_bos and self._vocab.add_bos_token else ids

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        stream = self.detokenizer(skip_special_tokens=skip_special_tokens)
        return stream.push_many(token_ids) + stream.flush()

    def detokenizer(self, *, skip_special_tokens: bool = True) -> StreamDetokenizer:
        return StreamDetokenizer(
            token_bytes=self._bytes_of,
            special_text=(lambda _: None) if skip_special_tokens else self._special_names.get,
        )

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True
    ) -> list[int]:
        """Ids of the file's chat template rendered over ``messages``: what transformers'
        ``apply_chat_template`` gives, except that special-token text inside a message
        stays plain text."""
        if self._template is None:
            raise TokenizationError(
                f"{self._vocab.path.name} has no chat template (tokenizer.chat_template); "
                "send a prompt to /v1/completions instead"
            )
        if not any(self._holds_special_text(m.content) for m in messages):
            text = self._template.render(messages, add_generation_prompt=add_generation_prompt)
            return self._encode(self._marked, text)
        ids: list[int] = []
        for segment in self._template.render_segments(
            messages, add_generation_prompt=add_generation_prompt
        ):
            ids += self._encode(self._plain if segment.is_content else self._marked, segment.text)
        return ids

    def chat_output(self) -> PlainChatOutput:
        return PlainChatOutput(self.detokenizer())

    def _holds_special_text(self, text: str) -> bool:
        return "<" in text and any(special in text for special in self._specials)

    def _bytes_of(self, token_id: int) -> bytes | None:
        if not 0 <= token_id < len(self._bytes):
            raise TokenizationError(
                f"token id {token_id} is outside the vocabulary (0..{len(self._bytes) - 1})"
            )
        return self._bytes[token_id]

    @staticmethod
    def _encode(tokenizer: HfTokenizer, text: str) -> list[int]:
        # The batch-fast path skips offsets, which Tandem never uses (~20% less CPU on
        # a 32k-token prompt); tokenizers releases the GIL while it runs.
        try:
            encodings = tokenizer.encode_batch_fast([text], add_special_tokens=False)
        except TypeError:  # lone surrogates cannot cross into Rust
            encodings = tokenizer.encode_batch_fast(
                [replace_lone_surrogates(text)], add_special_tokens=False
            )
        return list(encodings[0].ids)


def load_gguf_tokenizer(path: str | Path) -> GgufTokenizer:
    """The tokenizer inside the GGUF file at ``path`` (GgufTokenizerError if unusable)."""
    return GgufTokenizer(read_gguf_vocabulary(path))
