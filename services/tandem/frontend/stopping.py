"""OpenAI ``stop`` strings over streamed text.

The result never depends on how the text was chunked: generation stops at the earliest
position where any stop string occurs in the full text, exactly as if the whole text had
been searched at once. Two consequences for streaming:

- text is released only once it can no longer be the start of a stop string, so a
  client never sees part of a stop sequence (the stop string itself is never emitted,
  OpenAI's behaviour);
- a stop string that completed is not acted on while a *longer* one that starts earlier
  is still partially matched (stops ``["a", "baa"]`` over ``"ba" + "a"`` must cut before
  ``"b"``, not after it).
"""

from __future__ import annotations


class StopStringMatcher:
    __slots__ = ("_held", "_stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""

    @property
    def active(self) -> bool:
        return bool(self._stops)

    def feed(self, text: str) -> tuple[str, bool]:
        """Add generated text; returns (text safe to emit now, whether a stop matched).

        After a match, the emitted text ends just before the stop string and the
        matcher must not be fed again."""
        if not self._stops:
            return text, False
        buffer = self._held + text
        cut = self._earliest_match(buffer)
        # Anything from the earliest still-open partial match on must wait.
        pending = self._earliest_partial(buffer, limit=len(buffer) if cut is None else cut)
        if cut is not None and pending is None:
            self._held = ""
            return buffer[:cut], True
        keep_from = len(buffer) if pending is None else pending
        self._held = buffer[keep_from:]
        return buffer[:keep_from], False

    def flush(self) -> tuple[str, bool]:
        """End of generation: release what was held back, cut at a stop string if one
        completed while a longer candidate was still open."""
        held, self._held = self._held, ""
        cut = self._earliest_match(held) if self._stops else None
        return (held, False) if cut is None else (held[:cut], True)

    def _earliest_match(self, buffer: str) -> int | None:
        found = [i for i in (buffer.find(s) for s in self._stops) if i != -1]
        return min(found) if found else None

    def _earliest_partial(self, buffer: str, limit: int) -> int | None:
        """The first position before ``limit`` where the rest of ``buffer`` is a proper
        prefix of some stop string (a match that more text could complete)."""
        longest = max(len(s) for s in self._stops)
        for start in range(max(0, len(buffer) - longest + 1), limit):
            tail = buffer[start:]
            if any(len(stop) > len(tail) and stop.startswith(tail) for stop in self._stops):
                return start
        return None
