"""Stop strings over arbitrarily chunked text."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.frontend.stopping import StopStringMatcher


def run(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopStringMatcher(stops)
    out = []
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    tail, stopped = matcher.flush()
    out.append(tail)
    return "".join(out), stopped


@pytest.mark.parametrize(
    ("stops", "pieces", "expected"),
    [
        ((), ["ab", "cd"], ("abcd", False)),
        (("cd",), ["ab", "cd", "ef"], ("ab", True)),
        (("cd",), ["abc", "def"], ("ab", True)),
        (("cd",), ["abc"], ("abc", False)),
        (("xyz", "b"), ["a", "bxyz"], ("a", True)),
        (("bc", "abcd"), ["abcd"], ("", True)),
        (("bc", "cd"), ["abcd"], ("a", True)),
        (("END",), ["E", "N", "D"], ("", True)),
        (("aa",), ["a", "a"], ("", True)),
        # A longer stop starting earlier wins over a shorter one completing first...
        (("a", "baa"), ["ba", "a"], ("", True)),
        # ...and when it never completes, the shorter one still cuts at the end.
        (("a", "baa"), ["ba"], ("b", True)),
        (("a", "baa"), ["ba", "c"], ("b", True)),
    ],
)
def test_stop_table(stops: tuple[str, ...], pieces: list[str], expected: tuple[str, bool]) -> None:
    assert run(stops, pieces) == expected


def test_partial_stop_is_held_back() -> None:
    matcher = StopStringMatcher(("STOP",))
    assert matcher.feed("abcST") == ("abc", False)
    assert matcher.feed("Ox") == ("STOx", False)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="abc", max_size=40),
    stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
def test_chunking_never_changes_the_result(text: str, stops: list[str], cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    indices = [i for i in (text.find(s) for s in stops) if i != -1]
    expected = (text[: min(indices)], True) if indices else (text, False)
    assert run(tuple(stops), pieces) == expected
