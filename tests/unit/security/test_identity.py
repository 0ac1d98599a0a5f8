"""Per-role certificates: issued under one CA, told apart by their URI SAN, read back
from gRPC's auth context and from Python's ssl (tandem.security.identity)."""

from __future__ import annotations

import socket
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from tandem.security import (
    CredentialBundle,
    CredentialStore,
    Identity,
    identity_dir,
    issue,
    write_identities,
)
from tandem.security.credentials import check_bundle
from tandem.security.identity import Peer, grpc_peer, identity_uri, role_of, ssl_peer

from .conftest import NOW


def sans(cert: bytes) -> tuple[list[str], list[str]]:
    names = (
        x509.load_pem_x509_certificate(cert)
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    return (
        names.get_values_for_type(x509.DNSName),
        names.get_values_for_type(x509.UniformResourceIdentifier),
    )


def test_one_ca_signs_a_certificate_per_role_with_the_same_dns_name() -> None:
    issued = issue("demo", NOW)
    for identity in Identity:
        bundle = CredentialBundle.of(issued, identity)
        assert bundle.trust == issued.ca_cert
        name, _ = check_bundle(bundle, NOW)  # what peers check: unchanged
        assert name == "demo.tandem.internal"
        dns, uris = sans(bundle.cert)
        assert dns == ["demo.tandem.internal"]
        assert uris == [f"spiffe://demo.tandem.internal/{identity.value}"]
        assert role_of(uris) is identity
    assert CredentialBundle.of(issued) == CredentialBundle(issued.ca_cert, issued.cert, issued.key)
    assert issued.frontend_key != issued.key and issued.frontend_cert != issued.cert


@pytest.mark.parametrize(
    ("uris", "identity", "worker"),
    [
        (["spiffe://demo.tandem.internal/worker"], Identity.WORKER, True),
        (["spiffe://demo.tandem.internal/frontend"], Identity.FRONTEND, False),
        # Issued before roles existed: a member of the cluster, counted as a worker until
        # the upgrade rotation retires its CA.
        ([], None, True),
        (["demo.tandem.internal"], None, True),
        (["spiffe://demo.tandem.internal/admin"], None, True),
    ],
)
def test_the_role_is_the_last_segment_of_the_spiffe_uri(
    uris: list[str], identity: Identity | None, worker: bool
) -> None:
    assert role_of(uris) is identity
    assert Peer(role_of(uris), "x").is_worker is worker


def test_grpc_auth_context_is_read_for_the_role_and_a_name() -> None:
    frontend = identity_uri("demo.tandem.internal", Identity.FRONTEND)
    context = {
        "transport_security_type": [b"ssl"],
        "x509_common_name": [b"demo.tandem.internal"],
        "x509_subject_alternative_name": [b"demo.tandem.internal", frontend.encode()],
    }
    assert grpc_peer(context) == Peer(Identity.FRONTEND, frontend)
    legacy = {"x509_common_name": [b"demo.tandem.internal"]}
    assert grpc_peer(legacy) == Peer(None, "CN=demo.tandem.internal")
    assert grpc_peer({"transport_security_type": [b"insecure"]}) is None  # plaintext port


@pytest.mark.parametrize("identity", list(Identity))
def test_ssl_reads_the_client_s_role_after_a_mutual_handshake(
    tmp_path: Path, identity: Identity
) -> None:
    write_identities(tmp_path / "c", issue("demo", NOW))
    server = CredentialStore(identity_dir(tmp_path / "c", Identity.WORKER), now=lambda: NOW)
    client = CredentialStore(identity_dir(tmp_path / "c", identity), now=lambda: NOW)
    a, b = socket.socketpair()
    seen: list[Peer] = []

    def serve() -> None:
        with server.current().server_ssl.wrap_socket(a, server_side=True) as tls:
            seen.append(ssl_peer(tls))

    thread = threading.Thread(target=serve)
    thread.start()
    material = client.current()
    with material.client_ssl.wrap_socket(b, server_hostname=material.server_name):
        thread.join(timeout=10)
    assert seen == [Peer(identity, f"spiffe://demo.tandem.internal/{identity.value}")]


def test_each_role_gets_its_own_private_directory(tmp_path: Path) -> None:
    issued = issue("demo", NOW)
    root = tmp_path / "credentials"
    write_identities(root, issued)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for identity in Identity:
        directory = identity_dir(root, identity)
        assert directory == root / identity.value
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
        assert (directory / "tls.crt").read_bytes() == issued.pair(identity)[0]
        assert stat.S_IMODE((directory / "tls.key").stat().st_mode) == 0o600
    # The frontend's directory holds no worker key, and the other way round.
    assert (root / "frontend" / "tls.key").read_bytes() != (
        root / "worker" / "tls.key"
    ).read_bytes()
