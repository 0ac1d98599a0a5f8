"""Mirrors tensorrt_llm/executor/utils.py ``RequestError`` (v1.2.1)."""


class RequestError(RuntimeError):
    """The error raised from a request's result when the executor failed it."""
