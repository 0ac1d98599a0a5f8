"""KV transport backends by name, imported only when chosen (NIXL is heavy and optional)."""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from typing import cast

from tandem.kv.errors import KvBackendUnavailable
from tandem.kv.transport import KvTransport

# name -> (module, class); nothing is imported until make_transport asks for it.
_BACKENDS: dict[str, tuple[str, str]] = {
    "nixl": ("tandem.kv.nixl_transport", "NixlTransport"),
    "tcp": ("tandem.kv.tcp_transport", "TcpTransport"),
}


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


@cache
def nixl_available() -> bool:
    """True when ``nixl._api`` imports here (the package and its native libraries)."""
    if importlib.util.find_spec("nixl") is None:
        return False
    try:
        importlib.import_module("nixl._api")
    except (ImportError, OSError):
        return False
    return True


def make_transport(
    name: str, *, worker_id: str, incarnation: str, **options: object
) -> KvTransport:
    """Build the transport registered as ``name``; ``options`` go to its constructor.

    Raises KvBackendUnavailable for an unknown name or when NIXL cannot be imported.
    """
    if name not in _BACKENDS:
        raise KvBackendUnavailable(
            f"unknown KV backend {name!r}; choose one of {', '.join(_BACKENDS)}"
        )
    if name == "nixl" and not nixl_available():
        raise KvBackendUnavailable(
            "KV backend 'nixl' needs the nixl package (pip install --no-deps nixl nixl-cu12); "
            "use --kv-backend tcp where NIXL is not installed"
        )
    module_name, class_name = _BACKENDS[name]
    cls = cast(type[KvTransport], getattr(importlib.import_module(module_name), class_name))
    return cls(worker_id, incarnation, **options)
