"""W3C trace context over gRPC metadata: inject/extract, and a real gRPC call from the
router's worker client carrying it to a server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from tandem.proto import worker_pb2 as pb
from tandem.telemetry.propagation import extract_context, inject_metadata
from tandem.worker.client import WorkerClient

# A provider of its own: these tests need recording spans, not the process's global one.
TRACER = TracerProvider().get_tracer("test")


def test_injected_metadata_extracts_to_the_same_span_context() -> None:
    with TRACER.start_as_current_span("caller") as span:
        metadata = inject_metadata()
    sent = span.get_span_context()
    assert [key for key, _ in metadata] == ["traceparent"]
    received = trace.get_current_span(extract_context(metadata)).get_span_context()
    assert (received.trace_id, received.span_id) == (sent.trace_id, sent.span_id)
    assert received.is_remote and received.trace_flags.sampled


def test_an_explicit_context_is_injected_rather_than_the_current_one() -> None:
    span = TRACER.start_span("elsewhere")
    with TRACER.start_as_current_span("current"):
        metadata = inject_metadata(trace.set_span_in_context(span))
    received = trace.get_current_span(extract_context(metadata)).get_span_context()
    assert received.span_id == span.get_span_context().span_id


def test_without_a_span_nothing_is_sent_and_nothing_is_extracted() -> None:
    assert inject_metadata() == ()
    for metadata in (None, (), (("user-agent", "grpc"), ("bin-bin", b"\x00"))):
        context = extract_context(metadata)
        assert not trace.get_current_span(context).get_span_context().is_valid
        # A span started in it is the root of a new trace.
        span = TRACER.start_span("server", context=context)
        assert isinstance(span, ReadableSpan) and span.parent is None


def test_a_malformed_traceparent_starts_a_new_trace() -> None:
    context = extract_context((("traceparent", "00-not-a-trace-01"),))
    assert not trace.get_current_span(context).get_span_context().is_valid


@pytest.fixture
async def recording_server() -> AsyncIterator[tuple[str, list[tuple[str, Any]]]]:
    """A real gRPC server answering the worker API's Release, keeping each call's
    invocation metadata."""
    seen: list[tuple[str, Any]] = []

    async def release(request: pb.ReleaseRequest, context: Any) -> pb.ReleaseResponse:
        seen.extend(tuple(item) for item in context.invocation_metadata())
        return pb.ReleaseResponse(released=True)

    handler = grpc.method_handlers_generic_handler(
        "tandem.worker.v1.Worker",
        {
            "Release": grpc.unary_unary_rpc_method_handler(
                release,
                request_deserializer=pb.ReleaseRequest.FromString,
                response_serializer=pb.ReleaseResponse.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", seen
    finally:
        await server.stop(None)


async def test_the_worker_client_carries_the_callers_span_to_the_worker(
    recording_server: tuple[str, list[tuple[str, Any]]],
) -> None:
    address, seen = recording_server
    async with WorkerClient(address) as client:
        with TRACER.start_as_current_span("router.release") as span:
            assert await client.release("r1")
        traced = list(seen)
        seen.clear()
        assert await client.release("r2")  # no span current: no trace context sent
    received = trace.get_current_span(extract_context(traced)).get_span_context()
    assert received.trace_id == span.get_span_context().trace_id
    assert received.span_id == span.get_span_context().span_id
    assert "traceparent" not in {key for key, _ in seen}
