from __future__ import annotations

import pytest

from tandem.kv import registry
from tandem.kv.errors import KvBackendUnavailable
from tandem.kv.tcp_transport import TcpTransport


def test_backends_are_listed_by_name() -> None:
    assert set(registry.backend_names()) == {"nixl", "tcp"}


def test_make_transport_builds_tcp_with_options() -> None:
    transport = registry.make_transport("tcp", worker_id="w", incarnation="i", port=0)
    assert isinstance(transport, TcpTransport)
    assert transport.name == "w@i"


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(KvBackendUnavailable, match="unknown KV backend 'rdma'"):
        registry.make_transport("rdma", worker_id="w", incarnation="i")


def test_nixl_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "nixl_available", lambda: False)
    with pytest.raises(KvBackendUnavailable, match="--kv-backend tcp"):
        registry.make_transport("nixl", worker_id="w", incarnation="i")
