"""Who a mutual-TLS peer is: the role its certificate names.

Every certificate the cluster's CA signs carries the cluster's DNS name (what peers
check during the handshake) and one URI SAN naming its role::

    spiffe://<cluster>.tandem.internal/worker
    spiffe://<cluster>.tandem.internal/frontend

The handshake proves the peer holds a certificate of this cluster; the role decides
which calls it may make once connected (docs/security.md, "Roles"): workers may pull
KV from each other, the internet-facing frontend may not. A certificate of the cluster
that names no role was issued before roles existed (one member certificate for every
pod); it counts as a worker until the rotation that upgrades the cluster retires its CA.

gRPC exposes the SANs as ``x509_subject_alternative_name`` in ``context.auth_context()``;
Python's ``ssl`` as ``("URI", ...)`` entries of ``getpeercert()["subjectAltName"]``.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

logger = logging.getLogger(__name__)

URI_SCHEME = "spiffe://"
_GRPC_SAN = "x509_subject_alternative_name"
_GRPC_CN = "x509_common_name"


class Identity(StrEnum):
    """The role a certificate is issued for."""

    WORKER = "worker"
    FRONTEND = "frontend"


def identity_uri(server_name: str, identity: Identity) -> str:
    """The URI SAN of ``identity``'s certificate in the cluster named ``server_name``."""
    return f"{URI_SCHEME}{server_name}/{identity.value}"


@dataclass(frozen=True, slots=True)
class Peer:
    """An authenticated peer: its role (None: a pre-role certificate) and how to name it
    in logs (its role URI, else its subject CN)."""

    identity: Identity | None
    name: str

    @property
    def is_worker(self) -> bool:
        """May pull KV: a worker certificate, or one issued before roles existed."""
        return self.identity in (Identity.WORKER, None)


def role_of(uris: Iterable[str]) -> Identity | None:
    """The role named by the first role URI among ``uris`` (None: no role URI)."""
    for uri in uris:
        if not uri.startswith(URI_SCHEME):
            continue
        try:
            return Identity(uri.rsplit("/", 1)[-1])
        except ValueError:
            continue
    return None


def _peer(uris: list[str], common_name: str) -> Peer:
    role = role_of(uris)
    named = [u for u in uris if u.startswith(URI_SCHEME)]
    return Peer(role, named[0] if named else f"CN={common_name or '?'}")


def grpc_peer(auth_context: Mapping[str, Iterable[bytes]]) -> Peer | None:
    """The peer of a gRPC call (``context.auth_context()``), None on a plaintext port."""
    if _GRPC_SAN not in auth_context and _GRPC_CN not in auth_context:
        return None
    uris = [v.decode(errors="replace") for v in auth_context.get(_GRPC_SAN, ())]
    names = [v.decode(errors="replace") for v in auth_context.get(_GRPC_CN, ())]
    return _peer(uris, names[0] if names else "")


def ssl_peer(conn: ssl.SSLSocket) -> Peer:
    """The peer of a server-side TLS connection whose handshake required its certificate."""
    cert: Any = conn.getpeercert() or {}
    uris = [value for kind, value in cert.get("subjectAltName", ()) if kind == "URI"]
    common = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
    return _peer(uris, common[0] if common else "")
