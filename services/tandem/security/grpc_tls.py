"""Mutual TLS for gRPC (grpcio) from a ``CredentialStore``.

Servers require a client certificate signed by a CA of the cluster's trust bundle and
pick up rotated credentials for new handshakes (``grpc.dynamic_ssl_server_credentials``:
gRPC calls ``fetch`` before each handshake; returning None keeps the current ones).
Channels present the member certificate and check the server's against the same CAs
under the cluster's server name (peers are dialled by IP, so the name is overridden).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import grpc

from tandem.security.credentials import CredentialStore, TlsMaterial

ChannelOptions = Sequence[tuple[str, Any]]


def _server_config(material: TlsMaterial) -> Any:
    bundle = material.bundle
    return grpc.ssl_server_certificate_configuration(
        [(bundle.key, bundle.cert)], root_certificates=bundle.trust
    )


def server_credentials(store: CredentialStore) -> grpc.ServerCredentials:
    """Server credentials that follow ``store`` (new handshakes use new credentials)."""
    lock = threading.Lock()
    served = [store.current().fingerprint]

    def fetch() -> Any:
        material = store.current()
        with lock:
            if material.fingerprint == served[0]:
                return None
            served[0] = material.fingerprint
        return _server_config(material)

    return grpc.dynamic_ssl_server_credentials(
        _server_config(store.current()), fetch, require_client_authentication=True
    )


def channel_credentials(material: TlsMaterial) -> grpc.ChannelCredentials:
    bundle = material.bundle
    return grpc.ssl_channel_credentials(
        root_certificates=bundle.trust, private_key=bundle.key, certificate_chain=bundle.cert
    )


def secure_channel_options(
    material: TlsMaterial, options: ChannelOptions = ()
) -> list[tuple[str, Any]]:
    """``options`` plus the server name every member's certificate carries."""
    return [*options, ("grpc.ssl_target_name_override", material.server_name)]


def open_channel(
    address: str, material: TlsMaterial | None, options: ChannelOptions = ()
) -> grpc.aio.Channel:
    """An asyncio channel to ``address``: mutual TLS with ``material``, else plaintext
    (only for members started without credentials, on loopback)."""
    if material is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(
        address, channel_credentials(material), options=secure_channel_options(material, options)
    )
