"""OpenAI ``stop`` strings over streamed text.

Text is released only once it can no longer be the start of a stop string, so a
stream never shows a client part of a stop sequence; the stop string itself is never
emitted (OpenAI's behaviour).
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
        cut = -1
        for stop in self._stops:
            index = buffer.find(stop)
            if index != -1 and (cut == -1 or index < cut):
                cut = index
        if cut != -1:
            self._held = ""
            return buffer[:cut], True
        keep = self._longest_partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """End of generation: release whatever was held back."""
        held, self._held = self._held, ""
        return held

    def _longest_partial_suffix(self, buffer: str) -> int:
        longest = min(len(buffer), max(len(s) for s in self._stops) - 1)
        for size in range(longest, 0, -1):
            tail = buffer[-size:]
            if any(stop.startswith(tail) for stop in self._stops):
                return size
        return 0
