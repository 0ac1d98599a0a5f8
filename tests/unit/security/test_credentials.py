"""Cluster credentials: issued, written, checked and re-read (tandem.security)."""

from __future__ import annotations

import stat
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tandem.security import (
    CredentialBundle,
    CredentialsError,
    CredentialStore,
    check_plaintext_bind,
    is_loopback,
    issue,
    write_bundle,
)
from tandem.security.credentials import (
    CERTIFICATE_EXPIRY,
    check_bundle,
    read_bundle,
    register_expiry_metric,
)
from tandem.security.pki import join_pem, split_pem

from .conftest import NOW


def test_a_bundle_is_a_ca_and_the_member_certificate_it_signed() -> None:
    issued = issue("demo", NOW)
    name, expires = check_bundle(CredentialBundle.of(issued), NOW)
    assert name == "demo.tandem.internal"
    assert expires == issued.not_after == NOW + timedelta(days=365)


def test_two_clusters_never_trust_each_other() -> None:
    ours, theirs = issue("demo", NOW), issue("demo", NOW)  # same name, own CA each
    crossed = CredentialBundle(ours.ca_cert, theirs.cert, theirs.key)
    with pytest.raises(CredentialsError, match=r"not signed by a CA in ca\.crt"):
        check_bundle(crossed, NOW)


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda b, o: replace(b, key=o.key), "tls.key does not belong to the certificate"),
        (lambda b, o: replace(b, trust=b"not pem"), "ca.crt holds no PEM certificate"),
        (lambda b, o: replace(b, cert=b"-----BEGIN"), "tls.crt is not a PEM certificate"),
        (lambda b, o: replace(b, key=b"junk"), "tls.key is not an unencrypted PEM private key"),
    ],
)
def test_inconsistent_files_are_named(
    spoil: Callable[[CredentialBundle, CredentialBundle], CredentialBundle], message: str
) -> None:
    bundle = CredentialBundle.of(issue("demo", NOW))
    other = CredentialBundle.of(issue("demo", NOW))
    with pytest.raises(CredentialsError, match=message):
        check_bundle(spoil(bundle, other), NOW)


def test_an_expired_certificate_is_refused_with_its_dates() -> None:
    bundle = CredentialBundle.of(issue("demo", NOW, lifetime=timedelta(days=1)))
    with pytest.raises(CredentialsError, match="valid from 2026-12-01 11:55 to 2026-12-02"):
        check_bundle(bundle, NOW + timedelta(days=2))


def test_a_trust_bundle_may_hold_the_previous_ca_too() -> None:
    old, new = issue("demo", NOW), issue("demo", NOW)
    trust = join_pem(new.ca_cert, old.ca_cert, new.ca_cert)
    assert len(split_pem(trust)) == 2  # duplicates dropped
    for member in (old, new):  # either certificate checks out against the pair
        check_bundle(CredentialBundle(trust, member.cert, member.key), NOW)


def test_written_credentials_are_private(tmp_path: Path) -> None:
    directory = tmp_path / "creds"
    write_bundle(directory, CredentialBundle.of(issue("demo", NOW)))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("ca.crt", "tls.crt", "tls.key"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
    bundle, paths = read_bundle(directory)
    assert paths["tls.key"] == (directory / "tls.key").resolve()
    assert bundle.key.startswith(b"-----BEGIN PRIVATE KEY-----")


def test_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=r"cannot read .*/absent/ca.crt"):
        CredentialStore(tmp_path / "absent", now=lambda: NOW)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_store_follows_a_replaced_secret_and_ignores_a_broken_one(tmp_path: Path) -> None:
    """Kubernetes swaps a mounted Secret through a symlink to a new directory."""
    first, second = tmp_path / "..v1", tmp_path / "..v2"
    write_bundle(first, CredentialBundle.of(issue("demo", NOW)))
    mount = tmp_path / "mount"
    mount.mkdir()
    (tmp_path / "..data").symlink_to(first.name)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (mount / name).symlink_to(Path("..") / "..data" / name)
    clock = FakeClock()
    store = CredentialStore(mount, refresh_s=5.0, clock=clock, now=lambda: NOW)
    before = store.current()

    write_bundle(second, CredentialBundle.of(issue("demo", NOW)))
    (tmp_path / "..data").unlink()
    (tmp_path / "..data").symlink_to(second.name)
    clock.t = 4.0
    assert store.current() is before  # not looked at again yet
    clock.t = 5.0
    after = store.current()
    assert after.fingerprint != before.fingerprint
    assert after.bundle.cert == (second / "tls.crt").read_bytes()

    # A half-written update (the key of yet another certificate) keeps what works.
    (second / "tls.key").write_bytes(CredentialBundle.of(issue("demo", NOW)).key)
    clock.t = 10.0
    assert store.current() is after


def test_the_expiry_metric_reports_the_certificate_in_use(tmp_path: Path) -> None:
    """What the chart's certificate alert reads: the notAfter of what the member presents
    now, which moves once a renewed Secret reaches the mount."""
    write_bundle(tmp_path, CredentialBundle.of(issue("demo", NOW, timedelta(days=10))))
    clock = FakeClock()
    store = CredentialStore(tmp_path, refresh_s=5.0, clock=clock, now=lambda: NOW)
    registry = CollectorRegistry()
    register_expiry_metric(registry, store)
    assert registry.get_sample_value(CERTIFICATE_EXPIRY) == (NOW + timedelta(days=10)).timestamp()

    write_bundle(tmp_path, CredentialBundle.of(issue("demo", NOW, timedelta(days=365))))
    clock.t = 5.0
    assert registry.get_sample_value(CERTIFICATE_EXPIRY) == (NOW + timedelta(days=365)).timestamp()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost"])
def test_plaintext_is_allowed_on_loopback(host: str) -> None:
    assert is_loopback(host)
    check_plaintext_bind(host, "the worker's gRPC port")


@pytest.mark.parametrize("host", ["0.0.0.0", "10.244.0.7", "", "::", "worker-0"])
def test_plaintext_elsewhere_asks_for_credentials(host: str) -> None:
    with pytest.raises(CredentialsError, match="pass --credentials DIR"):
        check_plaintext_bind(host, "the worker's gRPC port")
