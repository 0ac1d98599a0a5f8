"""Body bytes -> validated request model, with errors that name the offending field.

Validation is strict (no ``"5"`` for 5, no ``"yes"`` for true), as OpenAI's API is,
and runs straight from the JSON bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tandem.frontend.errors import InvalidJsonError, InvalidRequestError

RequestT = TypeVar("RequestT", bound=BaseModel)

# Union-member tags pydantic puts into error locations; they are not request fields.
_TYPE_TAGS = frozenset(
    {"str", "int", "float", "bool", "list", "dict", "none", "constrained-str", "constrained-int"}
)


def parse_request(model: type[RequestT], body: bytes) -> RequestT:
    try:
        return model.model_validate_json(body, strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        first = errors[0]
        if first["type"] == "json_invalid":
            raise InvalidJsonError(f"the request body is not valid JSON: {first['msg']}") from None
        if first["type"] == "model_type" and not first["loc"]:
            raise InvalidRequestError("the request body must be a JSON object") from None
        param = format_param(first["loc"])
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        where = f"{param}: " if param else ""
        raise InvalidRequestError(f"{where}{first['msg']}{more}", param=param) from None


def format_param(loc: Sequence[Any]) -> str | None:
    """``('messages', 0, 'content')`` -> ``messages[0].content``; union tags dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier() and part not in _TYPE_TAGS:
            out += f".{part}" if out else part
    return out or None
