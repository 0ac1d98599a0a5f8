"""A worker's spans for the Prefill and Decode calls, children of the router's span that
the call's metadata carries (``telemetry.propagation``).

Decode spans a whole stream, so its spans are started and ended by hand rather than
made current: a context attached in a generator would leak into whatever resumes it.
``worker.decode`` covers the call; under it ``decode.first_token`` runs until the first
chunk is ready (a local prefill, or the KV pull and the handed-over token), holding
``kv.transfer`` when KV moved, and ``decode.stream`` from there to the last token.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tandem.telemetry.propagation import extract_context
from tandem.telemetry.tracing import TRACER
from tandem.worker.types import DecodeChunk

Metadata = Iterable[tuple[str, str | bytes]] | None


def prefill_span(worker_id: str, request_id: str, prompt_tokens: int, metadata: Metadata) -> Span:
    return TRACER.start_span(
        "worker.prefill",
        context=extract_context(metadata),
        kind=SpanKind.SERVER,
        attributes={
            "tandem.worker_id": worker_id,
            "tandem.request_id": request_id,
            "tandem.prompt_tokens": prompt_tokens,
        },
    )


class DecodeTrace:
    """The spans of one Decode call."""

    def __init__(
        self,
        worker_id: str,
        request_id: str,
        prompt_tokens: int,
        remote_kv: bool,
        metadata: Metadata,
    ) -> None:
        self._call = TRACER.start_span(
            "worker.decode",
            context=extract_context(metadata),
            kind=SpanKind.SERVER,
            attributes={
                "tandem.worker_id": worker_id,
                "tandem.request_id": request_id,
                "tandem.prompt_tokens": prompt_tokens,
                "tandem.remote_kv": remote_kv,
            },
        )
        self._inner = TRACER.start_span("decode.first_token", context=self._in_call())
        self._tokens = 0

    def _in_call(self) -> Context:
        return trace.set_span_in_context(self._call)

    def chunk(self, chunk: DecodeChunk) -> None:
        """A chunk about to be sent."""
        if self._tokens == 0:
            self._first(chunk)
        self._tokens += len(chunk.token_ids)

    def _first(self, chunk: DecodeChunk) -> None:
        now = time.time_ns()
        if chunk.kv_bytes_transferred:
            # Timed by the transport itself; it ended as the first chunk became ready.
            kv = TRACER.start_span(
                "kv.transfer",
                context=trace.set_span_in_context(self._inner),
                start_time=now - int(chunk.kv_transfer_seconds * 1e9),
                attributes={"tandem.kv.bytes": chunk.kv_bytes_transferred},
            )
            kv.end(end_time=now)
        self._inner.set_attribute("tandem.prefilled_locally", chunk.prefilled_locally)
        self._inner.end(end_time=now)
        self._inner = TRACER.start_span("decode.stream", context=self._in_call(), start_time=now)

    def finish(self, error: BaseException | None = None) -> None:
        """The call ended: ``error`` if it failed or was cancelled."""
        self._inner.set_attribute("tandem.generated_tokens", self._tokens)
        for span in (self._inner, self._call):
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__name__))
            span.end()
