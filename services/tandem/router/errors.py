"""Errors the router raises toward the frontend (all ``TandemError``)."""

from __future__ import annotations

from tandem.errors import TandemError


class OverloadedError(TandemError):
    """Admission refused: the bounded queue is full. Clients should retry later."""

    type = "rate_limit_error"
    code = "rate_limit_exceeded"
    http_status = 429

    def __init__(self, message: str, *, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class NoWorkerAvailableError(TandemError):
    """No healthy worker can take the request right now."""

    type = "server_error"
    code = "no_worker_available"
    http_status = 503


class GenerationFailedError(TandemError):
    """Workers failed the request and every retry was spent (or output had started)."""

    type = "server_error"
    code = "generation_failed"
    http_status = 503


class WorkerRejectedError(TandemError):
    """A worker refused the request itself as invalid (not retryable elsewhere)."""

    type = "invalid_request_error"
    code = "invalid_value"
    http_status = 400
