"""The root of Tandem's user-facing errors.

Every error that may reach an HTTP client derives from :class:`TandemError`; the
frontend has exactly one handler that turns one into OpenAI's error body
``{"error": {"message", "type", "param", "code"}}`` with ``http_status``. ``message`` is
shown to users verbatim, so it never carries a traceback or internal addresses.
"""

from __future__ import annotations


class TandemError(Exception):
    """A failure with a stable machine-readable shape.

    ``type`` is OpenAI's error class (``invalid_request_error``, ``server_error`` ...),
    ``code`` a stable string a client can switch on (``context_length_exceeded``),
    ``param`` the request field at fault, when one is.
    """

    type: str = "server_error"
    code: str | None = "internal_error"
    http_status: int = 500

    def __init__(
        self,
        message: str,
        *,
        type: str | None = None,  # shadows the builtin on purpose: OpenAI's field name
        code: str | None = None,
        http_status: int | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if type is not None:
            self.type = type
        if code is not None:
            self.code = code
        if http_status is not None:
            self.http_status = http_status
        self.param = param

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.message!r}, code={self.code!r}, "
            f"http_status={self.http_status}, param={self.param!r})"
        )


def already_running(what: str, *, fix: str, pid: int | None = None, port: int | None = None) -> str:
    """The one way every command says something it would start already runs: what, its
    pid and port when known, and the two ways on: ``{what} is already running (pid N, port
    P): use it, or {fix} first``."""
    facts = ", ".join(
        f"{label} {value}" for label, value in (("pid", pid), ("port", port)) if value is not None
    )
    return f"{what} is already running{f' ({facts})' if facts else ''}: use it, or {fix} first"
