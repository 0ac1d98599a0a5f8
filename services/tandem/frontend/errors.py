"""The frontend's errors: client mistakes, each mapped to OpenAI's status and code."""

from __future__ import annotations

from tandem.errors import TandemError

INVALID_REQUEST = "invalid_request_error"


class InvalidRequestError(TandemError):
    """A field is missing, malformed or out of range; ``param`` names it."""

    type = INVALID_REQUEST
    code = "invalid_value"
    http_status = 400


class UnsupportedParameterError(InvalidRequestError):
    """A well-formed OpenAI field whose requested behaviour Tandem does not provide."""

    code = "unsupported_parameter"


class InvalidJsonError(InvalidRequestError):
    code = "invalid_json"


class ContextLengthExceededError(InvalidRequestError):
    code = "context_length_exceeded"


class RequestTooLargeError(TandemError):
    type = INVALID_REQUEST
    code = "request_too_large"
    http_status = 413


class ModelNotFoundError(TandemError):
    type = INVALID_REQUEST
    code = "model_not_found"
    http_status = 404


class RouteNotFoundError(TandemError):
    type = INVALID_REQUEST
    code = "not_found"
    http_status = 404


class MethodNotAllowedError(TandemError):
    type = INVALID_REQUEST
    code = "method_not_allowed"
    http_status = 405


class MissingApiKeyError(TandemError):
    type = INVALID_REQUEST
    code = "missing_api_key"
    http_status = 401


class InvalidApiKeyError(TandemError):
    """Unknown, revoked or malformed: the message never echoes the key."""

    type = INVALID_REQUEST
    code = "invalid_api_key"
    http_status = 401


class InternalError(TandemError):
    """A bug on our side. The message is generic; details go to the log only."""

    type = "server_error"
    code = "internal_error"
    http_status = 500
