"""Worker errors, each carrying the gRPC status it maps to (by name, so the domain code
does not import grpc). The router retries on ``RESOURCE_EXHAUSTED`` (elsewhere),
``ABORTED`` (KV handoff failed: prefill locally) and ``UNAVAILABLE`` (worker gone or
draining); ``INVALID_ARGUMENT`` is never retried."""

from __future__ import annotations

from tandem.errors import TandemError


class WorkerError(TandemError):
    grpc_status: str = "INTERNAL"
    code: str | None = "worker_error"
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)


class InvalidRequest(WorkerError):
    grpc_status = "INVALID_ARGUMENT"
    type = "invalid_request_error"
    code = "invalid_request"
    http_status = 400


class WorkerBusy(WorkerError):
    """Queue or KV capacity exhausted right now; another worker may take it."""

    grpc_status = "RESOURCE_EXHAUSTED"
    code = "worker_busy"
    http_status = 429


class WorkerDraining(WorkerError):
    grpc_status = "UNAVAILABLE"
    code = "worker_draining"
    http_status = 503


class WrongRole(WorkerError):
    grpc_status = "FAILED_PRECONDITION"
    code = "wrong_worker_role"
    http_status = 500


class KvHandoffFailed(WorkerError):
    """Pulling a prefilled sequence's KV failed (peer gone or restarted, transfer error
    or timeout). The decode worker is fine: prefill locally or elsewhere."""

    grpc_status = "ABORTED"
    code = "kv_handoff_failed"
    http_status = 503


class KvConfigMismatch(KvHandoffFailed):
    """The prefill worker runs another model or KV layout (its config digest differs):
    its KV must not be used here. The router prefills locally or elsewhere instead."""

    code = "kv_config_mismatch"


class KvLayoutMismatch(WorkerError):
    """The two engines disagree about the KV layout (different model or config)."""

    grpc_status = "FAILED_PRECONDITION"
    code = "kv_layout_mismatch"
    http_status = 500


# Trailing metadata key of a failed call: the worker's error ``code`` (several errors
# share one gRPC status; the caller counts why, e.g. a KV handoff refused for another
# engine config against one whose transfer failed).
ERROR_CODE_METADATA = "tandem-error-code"


class WorkerCallError(WorkerError):
    """A call to a worker failed (client side); ``grpc_status`` is what the worker or
    the channel reported, ``remote_code`` the worker's error code when it sent one."""

    def __init__(
        self, address: str, status: str, message: str, *, remote_code: str | None = None
    ) -> None:
        super().__init__(f"{address}: {status}: {message}")
        self.address = address
        self.grpc_status = status
        self.remote_code = remote_code
        self.http_status = _HTTP_BY_STATUS.get(status, 502)


_HTTP_BY_STATUS = {
    "INVALID_ARGUMENT": 400,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
    "ABORTED": 503,
    "DEADLINE_EXCEEDED": 504,
}
