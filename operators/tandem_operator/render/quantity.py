"""Kubernetes resource quantities as numbers (pure): enough of the API's quantity grammar
(``k8s.io/apimachinery/pkg/api/resource``: a signed decimal number, an optional
exponent ``e``/``E``, or a binary ``Ki``..``Ei`` / decimal ``k``..``E`` suffix) to add a
byte count to a memory request a user wrote."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1024) ** i for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    **{s: Decimal(1000) ** i for i, s in enumerate(("k", "M", "G", "T", "P", "E"), 1)},
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+|[KMGTPE]i|[kmMGTPE])?$")


class QuantityError(ValueError):
    pass


def parse_quantity(text: str) -> Decimal:
    """``text``'s value ("1536Mi" -> 1610612736; "1.5G" -> 1500000000)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise QuantityError(f"not a Kubernetes quantity: {text!r}") from None
    if suffix in _SUFFIXES or suffix is None:  # "E" and "Ei" are exa and exbi
        return value * _SUFFIXES[suffix or ""]
    return value * Decimal(10) ** int(suffix[1:])  # an exponent


def add_bytes(quantity: str, extra: int) -> str:
    """``quantity`` plus ``extra`` bytes, as a whole number of bytes."""
    total = parse_quantity(quantity) + extra
    return str(int(total.to_integral_value(rounding="ROUND_CEILING")))
