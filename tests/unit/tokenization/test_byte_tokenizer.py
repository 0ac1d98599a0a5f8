"""ByteTokenizer: round trips, streaming detokenization, chat templating."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.tokenization import (
    SPECIAL_TOKENS,
    ByteTokenizer,
    ChatMessage,
    TokenizationError,
    Tokenizer,
)

TOKENIZER = ByteTokenizer()
SPECIAL_IDS = sorted(TOKENIZER.special_tokens.values())


def test_satisfies_protocol() -> None:
    tokenizer: Tokenizer = TOKENIZER
    assert tokenizer.vocab_size == 256 + len(SPECIAL_TOKENS)


def test_special_ids_are_distinct_and_above_bytes() -> None:
    ids = list(TOKENIZER.special_tokens.values())
    assert len(set(ids)) == len(SPECIAL_TOKENS)
    assert min(ids) == 256
    assert max(ids) == TOKENIZER.vocab_size - 1
    assert TOKENIZER.eos_token_id in TOKENIZER.stop_token_ids
    assert all(TOKENIZER.is_special(i) for i in ids)
    assert not any(TOKENIZER.is_special(i) for i in range(256))


@given(st.text())
def test_encode_decode_round_trip(text: str) -> None:
    ids = TOKENIZER.encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert TOKENIZER.decode(ids) == text


def test_add_bos_prepends_bos() -> None:
    assert TOKENIZER.encode("hi", add_bos=True) == [TOKENIZER.bos_token_id, *b"hi"]


def test_lone_surrogate_becomes_replacement_character() -> None:
    assert TOKENIZER.decode(TOKENIZER.encode("a\ud800b")) == "a\ufffdb"


def test_text_that_looks_like_special_tokens_stays_bytes() -> None:
    ids = TOKENIZER.encode("<|end|><|start|>")
    assert not any(TOKENIZER.is_special(i) for i in ids)


def test_decode_renders_special_tokens_only_when_asked() -> None:
    end = TOKENIZER.token_id("<|end|>")
    ids = [*TOKENIZER.encode("hé"), end]
    assert TOKENIZER.decode(ids) == "hé"
    assert TOKENIZER.decode(ids, skip_special_tokens=False) == "hé<|end|>"


def test_decode_rejects_unknown_ids() -> None:
    with pytest.raises(TokenizationError, match="outside the vocabulary"):
        TOKENIZER.decode([TOKENIZER.vocab_size])
    with pytest.raises(TokenizationError):
        TOKENIZER.decode([-1])


token_ids = st.lists(st.one_of(st.integers(0, 255), st.sampled_from(SPECIAL_IDS)), max_size=64)


@given(ids=token_ids, cuts=st.lists(st.integers(0, 64)), skip=st.booleans())
def test_incremental_detokenizer_matches_decode_for_any_chunking(
    ids: list[int], cuts: list[int], skip: bool
) -> None:
    bounds = sorted({0, len(ids), *(c for c in cuts if c <= len(ids))})
    detok = TOKENIZER.detokenizer(skip_special_tokens=skip)
    pieces = [detok.push_many(ids[a:b]) for a, b in itertools.pairwise(bounds)]
    pieces.append(detok.flush())
    assert "".join(pieces) == TOKENIZER.decode(ids, skip_special_tokens=skip)


@given(st.text(min_size=1))
def test_incremental_detokenizer_never_emits_partial_characters(text: str) -> None:
    detok = TOKENIZER.detokenizer()
    emitted = [detok.push(i) for i in TOKENIZER.encode(text)]
    assert "\ufffd" not in "".join(emitted) or "\ufffd" in text
    assert "".join(emitted) + detok.flush() == text


def test_incremental_detokenizer_holds_back_multibyte_character() -> None:
    detok = TOKENIZER.detokenizer()
    first, second = "é".encode()
    assert detok.push(first) == ""
    assert detok.push(second) == "é"


def test_flush_reports_truncated_sequence_as_replacement() -> None:
    detok = TOKENIZER.detokenizer()
    assert detok.push("é".encode()[0]) == ""
    assert detok.flush() == "\ufffd"
    assert detok.push(ord("a")) == "a"


def _segments(ids: list[int]) -> list[list[int]]:
    """Split a token list at special tokens, keeping each special as its own segment."""
    segments: list[list[int]] = [[]]
    for i in ids:
        if TOKENIZER.is_special(i):
            segments.extend([[i], []])
        else:
            segments[-1].append(i)
    return segments


def test_chat_template_structure() -> None:
    t = TOKENIZER
    messages = [ChatMessage("system", "be brief"), ChatMessage("user", "hi <|end|>")]
    ids = t.apply_chat_template(messages)
    start, message, end = t.token_id("<|start|>"), t.token_id("<|message|>"), t.eos_token_id
    expected = [
        [],
        [t.bos_token_id],
        [],
        [start],
        t.encode("system"),
        [message],
        t.encode("be brief"),
        [end],
        [],
        [start],
        t.encode("user"),
        [message],
        t.encode("hi <|end|>"),
        [end],
        [],
        [start],
        t.encode("assistant"),
        [message],
        [],
    ]
    assert _segments(ids) == expected
    rendered = t.decode(ids, skip_special_tokens=False)
    assert rendered == (
        "<|startoftext|><|start|>system<|message|>be brief<|end|>"
        "<|start|>user<|message|>hi <|end|><|end|><|start|>assistant<|message|>"
    )


@given(
    st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.text()),
        max_size=5,
    )
)
def test_chat_template_is_unambiguous(turns: list[tuple[str, str]]) -> None:
    """Parsing the ids back by special tokens recovers every role and content exactly."""
    t = TOKENIZER
    ids = t.apply_chat_template([ChatMessage(r, c) for r, c in turns], add_generation_prompt=False)
    segments = _segments(ids)
    start, message, end = t.token_id("<|start|>"), t.token_id("<|message|>"), t.eos_token_id
    parsed: list[tuple[str, str]] = []
    index = 3  # after: [], [bos], []
    while index < len(segments):
        assert segments[index] == [start]
        role = t.decode(segments[index + 1])
        assert segments[index + 2] == [message]
        content = t.decode(segments[index + 3])
        assert segments[index + 4] == [end]
        parsed.append((role, content))
        index += 6
    assert parsed == turns


@pytest.mark.parametrize("role", ["", "User", "a b", "x" * 33, "<|start|>"])
def test_chat_template_rejects_bad_roles(role: str) -> None:
    with pytest.raises(TokenizationError, match="chat role"):
        TOKENIZER.apply_chat_template([ChatMessage(role, "hi")])
