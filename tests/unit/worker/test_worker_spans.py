"""A worker's spans join the caller's trace: real workers on 127.0.0.1 (gRPC, TCP KV,
reference engine), called under a caller span as the router calls them. Prefill and
Decode are children of the caller's span; under Decode, the first token (holding the
KV transfer, timed by the transport) and then the stream."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from tandem.engines.base import SamplingParams
from tandem.telemetry.tracing import TRACER
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import Role
from tandem_dev.doubles.span_recorder import by_name, recording

from .conftest import WorkerFactory

PROMPT = [(i * 29 + 7) % 200 + 20 for i in range(48)]
SAMPLING = SamplingParams(max_tokens=6, seed=1)


async def test_prefill_kv_transfer_and_decode_spans_hang_under_the_callers(
    worker: WorkerFactory,
) -> None:
    with recording() as finished:
        async with (
            worker(Role.PREFILL, "p1") as prefill,
            worker(Role.DECODE, "d1") as decode,
        ):
            with TRACER.start_as_current_span("caller") as caller:
                reply = await prefill.client.prefill("r1", PROMPT, SAMPLING)
                assert reply.kv is not None
                stream = decode.client.decode(
                    "r1", PROMPT, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
                )
                tokens = [t async for chunk in stream for t in chunk.token_ids]
    assert len(tokens) == SAMPLING.max_tokens
    spans = by_name(finished)

    def parent_of(name: str) -> int | None:
        parent = spans[name].parent
        return None if parent is None else parent.span_id

    caller_id = caller.get_span_context().span_id
    assert parent_of("worker.prefill") == caller_id
    assert parent_of("worker.decode") == caller_id
    decode_id = spans["worker.decode"].context.span_id
    assert parent_of("decode.first_token") == decode_id
    assert parent_of("decode.stream") == decode_id
    assert parent_of("kv.transfer") == spans["decode.first_token"].context.span_id
    assert {s.context.trace_id for s in finished} == {caller.get_span_context().trace_id}
    kv = spans["kv.transfer"]
    assert kv.attributes is not None and kv.attributes["tandem.kv.bytes"] == reply.kv.nbytes
    first = spans["decode.first_token"]
    assert kv.start_time is not None and first.start_time is not None
    assert first.start_time <= kv.start_time and kv.end_time == first.end_time
    stream_span = spans["decode.stream"]
    assert stream_span.attributes is not None
    assert stream_span.attributes["tandem.generated_tokens"] == SAMPLING.max_tokens
    assert spans["worker.decode"].status.is_ok


async def test_a_refused_decode_ends_its_spans_as_errors(worker: WorkerFactory) -> None:
    with recording() as finished:
        async with worker(Role.PREFILL, "p1") as prefill:
            with pytest.raises(WorkerCallError) as refused:
                async for _ in prefill.client.decode("r1", PROMPT, SAMPLING):
                    pass
    assert refused.value.grpc_status == "FAILED_PRECONDITION"  # a prefill worker's role
    spans = by_name(finished)
    assert not spans["worker.decode"].status.is_ok
    assert not spans["decode.first_token"].status.is_ok
    assert spans["worker.decode"].parent is None  # no caller span: a trace of its own
    assert not trace.get_current_span().get_span_context().is_valid
