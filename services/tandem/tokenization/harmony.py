"""gpt-oss's harmony chat format behind the ``Tokenizer`` protocol, fully offline.

Uses ``openai-harmony`` (0.0.8 when written) for rendering prompts, parsing responses
and its ``o200k_harmony`` encoding. That encoding is built from the
``o200k_base.tiktoken`` vocabulary, which the library would download. Tandem never lets
it: by default the file is rebuilt from a PyPI wheel into a cache directory
(``tandem.tokenization.o200k``); a directory holding the file can be given instead. Either
way its SHA-256 is checked against the hash openai-harmony expects, and the library is
pointed at it through ``TIKTOKEN_ENCODINGS_BASE``, the variable ``load_harmony_encoding``
reads (openai/harmony ``src/tiktoken_ext/public_encodings.rs``). A missing or wrong file
fails with the path and what to do.

Chat messages map to harmony as gpt-oss's own chat template does: one system message
(harmony's defaults), OpenAI ``system``/``developer`` messages become the developer
instructions, assistant turns are ``final``-channel messages, and a generation prompt
opens an assistant turn. Generation stops at harmony's stop tokens for assistant
actions (``<|return|>``, ``<|call|>``) -- not at ``<|end|>``, which closes the
``analysis`` message before the answer. Responses are parsed by
``tandem.tokenization.harmony_output``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Protocol

from tandem.tokenization.detokenizer import StreamDetokenizer
from tandem.tokenization.harmony_output import HarmonyChatOutput
from tandem.tokenization.o200k import O200K_FILE, O200K_SHA256, ensure_o200k
from tandem.tokenization.protocol import ChatMessage, TokenizationError

# The hash openai-harmony 0.0.8 requires of o200k_base.tiktoken (it refuses other files).
VOCAB_FILE, VOCAB_SHA256 = O200K_FILE, O200K_SHA256
ENCODINGS_ENV = "TIKTOKEN_ENCODINGS_BASE"
HARMONY_GPT_OSS = "HarmonyGptOss"
# gpt-oss's config.json: the embedding table is padded to 201,088 rows.
GPT_OSS_VOCAB_SIZE = 201_088

BOS = "<|startoftext|>"
RETURN = "<|return|>"

# TIKTOKEN_ENCODINGS_BASE is process-global: one load at a time.
_ENV_LOCK = threading.Lock()


class HarmonyLoadError(TokenizationError):
    """The harmony tokenizer cannot be built here; the message says what is missing."""


class HarmonyEncodingLike(Protocol):
    """What we call on ``openai_harmony.HarmonyEncoding`` (openai-harmony 0.0.8)."""

    @property
    def name(self) -> str: ...

    @property
    def special_tokens_set(self) -> set[str]: ...

    def encode(
        self, text: str, *, allowed_special: Any = ..., disallowed_special: Any = ...
    ) -> list[int]: ...

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str: ...

    def is_special_token(self, token: int) -> bool: ...

    def stop_tokens(self) -> list[int]: ...

    def stop_tokens_for_assistant_actions(self) -> list[int]: ...

    def render_conversation(self, conversation: Any, config: Any = None) -> list[int]: ...

    def render_conversation_for_completion(
        self, conversation: Any, next_turn_role: Any, config: Any = None
    ) -> list[int]: ...


def find_vocab_file(*directories: str | Path) -> Path:
    """``o200k_base.tiktoken`` in one of ``directories`` (or their ``encodings/``)."""
    candidates = [
        Path(d) / name for d in directories for name in (VOCAB_FILE, f"encodings/{VOCAB_FILE}")
    ]
    for path in candidates:
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in candidates) or "(no directory given)"
    raise HarmonyLoadError(
        f"the harmony tokenizer needs {VOCAB_FILE}; looked for {tried}. Put the file there, "
        "or give no directory to have Tandem rebuild it from the quicktok-v1 wheel"
    )


def check_vocab_file(path: Path) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != VOCAB_SHA256:
        raise HarmonyLoadError(
            f"{path} has SHA-256 {digest}, but openai-harmony needs the o200k_base vocabulary "
            f"with SHA-256 {VOCAB_SHA256}; replace it (or give no directory to have Tandem "
            "rebuild it from the quicktok-v1 wheel)"
        )


def import_openai_harmony() -> ModuleType:
    try:
        return importlib.import_module("openai_harmony")
    except ImportError as error:
        raise HarmonyLoadError(
            "the harmony tokenizer needs openai-harmony: pip install 'openai-harmony>=0.0.8,<0.1'"
        ) from error


def load_harmony_tokenizer(*directories: str | Path, verify_hash: bool = True) -> HarmonyTokenizer:
    """Build the gpt-oss tokenizer from local files only: ``o200k_base.tiktoken`` from
    one of ``directories``, else rebuilt into Tandem's cache (see the module docstring)."""
    vocab = find_vocab_file(*directories) if directories else ensure_o200k() / VOCAB_FILE
    if verify_hash:
        check_vocab_file(vocab)
    harmony = import_openai_harmony()
    with _ENV_LOCK:
        previous = os.environ.get(ENCODINGS_ENV)
        os.environ[ENCODINGS_ENV] = str(vocab.parent)
        try:
            encoding = harmony.load_harmony_encoding(HARMONY_GPT_OSS)
        except harmony.HarmonyError as error:
            raise HarmonyLoadError(f"openai-harmony could not load {vocab}: {error}") from error
        finally:
            if previous is None:
                os.environ.pop(ENCODINGS_ENV, None)
            else:
                os.environ[ENCODINGS_ENV] = previous
    return HarmonyTokenizer(encoding, harmony, hashlib.sha256(vocab.read_bytes()).hexdigest())


class HarmonyTokenizer:
    """``Tokenizer`` over a harmony encoding (``openai_harmony`` passed in for its
    message types)."""

    def __init__(
        self, encoding: HarmonyEncodingLike, harmony: ModuleType, vocab_sha256: str = VOCAB_SHA256
    ) -> None:
        self._encoding = encoding
        self._harmony = harmony
        # One encode of all special texts in a row (one id each): encoding them one by
        # one costs ~40 ms apiece in openai-harmony 0.0.8, and there are 1,091.
        names = sorted(encoding.special_tokens_set)
        ids = encoding.encode("".join(names), allowed_special="all")
        if len(ids) != len(names):
            raise HarmonyLoadError(f"{encoding.name}: special tokens do not encode one id each")
        specials = dict(zip(names, ids, strict=True))
        self._specials: Mapping[str, int] = MappingProxyType(specials)
        self._special_names = {v: k for k, v in specials.items()}
        # Sorted: openai-harmony returns them in a per-process (hash) order.
        self._stops = tuple(sorted(set(encoding.stop_tokens_for_assistant_actions())))
        self._vocab_sha256 = vocab_sha256

    @property
    def name(self) -> str:
        return str(self._encoding.name)

    @property
    def vocab_size(self) -> int:
        return GPT_OSS_VOCAB_SIZE

    @property
    def bos_token_id(self) -> int:
        return self._specials[BOS]

    @property
    def eos_token_id(self) -> int:
        return self._specials[RETURN]

    @property
    def special_tokens(self) -> Mapping[str, int]:
        return self._specials

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stops

    def is_special(self, token_id: int) -> bool:
        return self._encoding.is_special_token(token_id)

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        # Special-token text in user input stays plain text (never a chat marker).
        ids = self._encoding.encode(text, allowed_special=set(), disallowed_special=())
        return [self.bos_token_id, *ids] if add_bos else ids

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        if skip_special_tokens:
            token_ids = [t for t in token_ids if not self._encoding.is_special_token(t)]
        return self._encoding.decode(list(token_ids))

    def detokenizer(self, *, skip_special_tokens: bool = True) -> StreamDetokenizer:
        return StreamDetokenizer(
            token_bytes=self._token_bytes,
            special_text=lambda t: None if skip_special_tokens else self._special_names.get(t),
        )

    def chat_output(self) -> HarmonyChatOutput:
        return HarmonyChatOutput(self._encoding, self._harmony, self.detokenizer)

    def content_digest(self) -> str:
        """The vocabulary file's hash and the harmony library that renders prompts."""
        version = getattr(self._harmony, "__version__", "") or _distribution_version()
        identity = f"{self.name};{self._vocab_sha256};openai-harmony {version}"
        return hashlib.sha256(identity.encode()).hexdigest()

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True
    ) -> list[int]:
        harmony = self._harmony
        role = harmony.Role
        instructions = [m.content for m in messages if m.role in ("system", "developer")]
        turns = [harmony.Message.from_role_and_content(role.SYSTEM, harmony.SystemContent.new())]
        if instructions:
            developer = harmony.DeveloperContent.new().with_instructions("\n\n".join(instructions))
            turns.append(harmony.Message.from_role_and_content(role.DEVELOPER, developer))
        for message in messages:
            if message.role in ("system", "developer"):
                continue
            if message.role == "user":
                turns.append(harmony.Message.from_role_and_content(role.USER, message.content))
            elif message.role == "assistant":
                reply = harmony.Message.from_role_and_content(role.ASSISTANT, message.content)
                turns.append(reply.with_channel("final"))
            else:
                raise TokenizationError(
                    f"chat role {message.role!r} is not supported by the harmony template "
                    "(use system, developer, user or assistant)"
                )
        conversation = harmony.Conversation.from_messages(turns)
        if add_generation_prompt:
            return list(
                self._encoding.render_conversation_for_completion(conversation, role.ASSISTANT)
            )
        return list(self._encoding.render_conversation(conversation))

    def _token_bytes(self, token_id: int) -> bytes | None:
        if not 0 <= token_id < GPT_OSS_VOCAB_SIZE:
            raise TokenizationError(
                f"token id {token_id} is outside the vocabulary (0..{GPT_OSS_VOCAB_SIZE - 1})"
            )
        if self._encoding.is_special_token(token_id):
            return None
        # surrogateescape round-trips bytes that are not valid UTF-8 on their own.
        text = self._encoding.decode([token_id], errors="surrogateescape")
        return text.encode("utf-8", errors="surrogateescape")


def _distribution_version() -> str:
    try:
        return importlib.metadata.version("openai-harmony")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
