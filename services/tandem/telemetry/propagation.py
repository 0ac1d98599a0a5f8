"""W3C trace context over gRPC metadata: the frontend's router injects it into each call
to a worker, the worker extracts it so its spans join the request's trace.

gRPC metadata keys are lowercase ASCII, which is what ``traceparent`` and
``tracestate`` already are. With no recording span current, nothing is injected.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Metadata = tuple[tuple[str, str], ...]

# Only W3C trace context, whatever OTEL_PROPAGATORS says: both ends are Tandem.
_PROPAGATOR = TraceContextTextMapPropagator()


def inject_metadata(context: Context | None = None) -> Metadata:
    """gRPC call metadata carrying ``context`` (None: the current one)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return tuple(carrier.items())


def extract_context(metadata: Iterable[tuple[str, str | bytes]] | None) -> Context:
    """The caller's trace context from a call's invocation metadata (an empty context
    when it sent none, so spans started in it are roots)."""
    carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
    return _PROPAGATOR.extract(carrier)
