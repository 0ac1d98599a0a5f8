"""The spans a process finishes while a test looks: an OpenTelemetry SDK tracer provider,
installed once per process (OpenTelemetry allows one global provider), whose processor
keeps finished spans only inside ``recording()``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider


class _Recorder(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] | None = None

    def on_end(self, span: ReadableSpan) -> None:
        if self.spans is not None:
            self.spans.append(span)


_recorder: _Recorder | None = None


@contextlib.contextmanager
def recording() -> Iterator[list[ReadableSpan]]:
    """The spans finished until the block ends, in the order they ended."""
    global _recorder
    if _recorder is None:
        _recorder = _Recorder()
        provider = TracerProvider()
        provider.add_span_processor(_recorder)
        trace.set_tracer_provider(provider)
    spans: list[ReadableSpan] = []
    _recorder.spans = spans
    try:
        yield spans
    finally:
        _recorder.spans = None


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    """``spans`` by name; each name must be there once."""
    out: dict[str, ReadableSpan] = {}
    for span in spans:
        assert span.name not in out, f"{span.name} twice"
        out[span.name] = span
    return out
