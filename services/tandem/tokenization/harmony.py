"""gpt-oss's harmony chat format behind the ``Tokenizer`` protocol, fully offline.

Uses ``openai-harmony`` (the ``gpu`` extra; 0.0.8 at the time of writing). Its
``o200k_harmony`` encoding is built from the ``o200k_base.tiktoken`` vocabulary, which
the library normally downloads. Tandem never lets it: the file must already be on disk
(next to the model, or in an encodings directory), its SHA-256 is checked against the
hash openai-harmony expects, and the library is pointed at it through its
``TIKTOKEN_ENCODINGS_BASE`` variable (read by ``load_harmony_encoding``). A missing or
wrong file fails with the path and what to put there.

Chat messages map to harmony as gpt-oss's own chat template does: one system message
(harmony's defaults), OpenAI ``system``/``developer`` messages become the developer
instructions, assistant turns are ``final``-channel messages, and a generation prompt
opens an assistant turn.
"""

from __future__ import annotations

import codecs
import hashlib
import importlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Protocol

from tandem.tokenization.protocol import ChatMessage, TokenizationError

VOCAB_FILE = "o200k_base.tiktoken"
# SHA-256 openai-harmony 0.0.8 requires of o200k_base.tiktoken (it refuses other files).
VOCAB_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
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
        f"the harmony tokenizer needs {VOCAB_FILE}; looked for {tried}. Download {VOCAB_URL} "
        "into the model directory (or an encodings directory) on a machine with internet "
        "access and ship it with the model"
    )


def check_vocab_file(path: Path) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != VOCAB_SHA256:
        raise HarmonyLoadError(
            f"{path} has SHA-256 {digest}, but openai-harmony needs the o200k_base vocabulary "
            f"with SHA-256 {VOCAB_SHA256}; replace it with a fresh copy of {VOCAB_URL}"
        )


def import_openai_harmony() -> ModuleType:
    try:
        return importlib.import_module("openai_harmony")
    except ImportError as error:
        raise HarmonyLoadError(
            "the harmony tokenizer needs openai-harmony: pip install 'tandem[gpu]'"
        ) from error


def load_harmony_tokenizer(*directories: str | Path, verify_hash: bool = True) -> HarmonyTokenizer:
    """Build the gpt-oss tokenizer from local files only (see the module docstring)."""
    searched = directories or tuple(filter(None, [os.environ.get(ENCODINGS_ENV)]))
    vocab = find_vocab_file(*searched)
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
    return HarmonyTokenizer(encoding, harmony)


class HarmonyTokenizer:
    """``Tokenizer`` over a harmony encoding (``openai_harmony`` passed in for its
    message types)."""

    def __init__(self, encoding: HarmonyEncodingLike, harmony: ModuleType) -> None:
        self._encoding = encoding
        self._harmony = harmony
        specials = {
            text: encoding.encode(text, allowed_special={text})[0]
            for text in sorted(encoding.special_tokens_set)
        }
        self._specials: Mapping[str, int] = MappingProxyType(specials)
        self._special_names = {v: k for k, v in specials.items()}
        stops = encoding.stop_tokens_for_assistant_actions() + encoding.stop_tokens()
        self._stops = tuple(dict.fromkeys(stops))

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

    def detokenizer(self, *, skip_special_tokens: bool = True) -> HarmonyDetokenizer:
        return HarmonyDetokenizer(
            token_bytes=self._token_bytes,
            special_text=lambda t: None if skip_special_tokens else self._special_names.get(t),
            is_special=self._encoding.is_special_token,
        )

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

    def _token_bytes(self, token_id: int) -> bytes:
        # surrogateescape round-trips bytes that are not valid UTF-8 on their own.
        text = self._encoding.decode([token_id], errors="surrogateescape")
        return text.encode("utf-8", errors="surrogateescape")


class HarmonyDetokenizer:
    """Streams text from BPE tokens, holding back incomplete UTF-8 sequences."""

    def __init__(
        self,
        *,
        token_bytes: Callable[[int], bytes],
        special_text: Callable[[int], str | None],
        is_special: Callable[[int], bool],
    ) -> None:
        self._token_bytes = token_bytes
        self._special_text = special_text
        self._is_special = is_special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        if not self._is_special(token_id):
            return self._decoder.decode(self._token_bytes(token_id))
        text = self._special_text(token_id)
        return "" if text is None else self.flush() + text

    def push_many(self, token_ids: Iterable[int]) -> str:
        return "".join(self.push(t) for t in token_ids)

    def flush(self) -> str:
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text
