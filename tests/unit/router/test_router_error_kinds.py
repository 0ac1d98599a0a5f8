"""gRPC status names (as the worker client reports them) -> what the router does."""

from __future__ import annotations

import pytest

from tandem.router.ports import WorkerErrorKind, call_error, classify
from tandem.worker.errors import WorkerCallError


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("UNAVAILABLE", WorkerErrorKind.UNAVAILABLE),
        ("DEADLINE_EXCEEDED", WorkerErrorKind.TIMEOUT),
        ("RESOURCE_EXHAUSTED", WorkerErrorKind.CAPACITY),
        ("INVALID_ARGUMENT", WorkerErrorKind.INVALID),
        ("OUT_OF_RANGE", WorkerErrorKind.INVALID),
        ("ABORTED", WorkerErrorKind.KV_HANDOFF),
        ("FAILED_PRECONDITION", WorkerErrorKind.INTERNAL),
        ("INTERNAL", WorkerErrorKind.INTERNAL),
        ("UNKNOWN", WorkerErrorKind.INTERNAL),
    ],
)
def test_classify(status: str, kind: WorkerErrorKind) -> None:
    assert classify(WorkerCallError("w:1", status, "boom")) is kind


@pytest.mark.parametrize("kind", list(WorkerErrorKind))
def test_router_made_errors_classify_back(kind: WorkerErrorKind) -> None:
    error = call_error("w:1", kind, "stalled")
    assert classify(error) is kind
    assert "w:1" in error.message and "stalled" in error.message
