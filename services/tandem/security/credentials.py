"""A member's credentials on disk: read, checked, and re-read when they change.

A credentials directory holds three PEM files (``ca.crt``: the CAs this member trusts,
``tls.crt`` + ``tls.key``: what it presents, the certificate of its role). The operator
mounts them from the cluster's Secret (each role's pods get their own pair under these
names); ``tandem up`` writes one directory per role into the cluster's state directory
(``write_identities``).

Kubernetes replaces a mounted Secret's files atomically (a symlink to a new timestamped
directory) about a minute after the Secret changes. ``CredentialStore.current`` looks at
the files again at most every ``refresh_s`` seconds; a new, consistent set becomes the
current ``TlsMaterial`` (new TLS handshakes use it, connections already open keep theirs),
and a set that does not check out (half-written, a key that does not match) is logged
and ignored until it does, so a bad Secret never takes a running member down.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from prometheus_client import CollectorRegistry, Gauge

from tandem.security.identity import Identity
from tandem.security.pki import CredentialBundle, Issued

logger = logging.getLogger(__name__)

TRUST_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
FILES = (TRUST_FILE, CERT_FILE, KEY_FILE)
DEFAULT_REFRESH_S = 5.0


class CredentialsError(ValueError):
    """Credentials that are missing, unreadable or inconsistent; the message says which."""


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """One checked set of credentials, ready for gRPC and for ``ssl``."""

    bundle: CredentialBundle
    server_name: str  # the DNS SAN every member presents and checks
    fingerprint: str  # changes whenever any of the three files does
    not_after: datetime
    server_ssl: ssl.SSLContext  # requires a client certificate from the same CAs
    client_ssl: ssl.SSLContext  # presents ours, checks the server's against the CAs


def check_bundle(bundle: CredentialBundle, now: datetime) -> tuple[str, datetime]:
    """Raise CredentialsError unless ``bundle`` is usable at ``now``; return the
    certificate's server name and expiry."""
    try:
        cas = x509.load_pem_x509_certificates(bundle.trust)
    except ValueError:
        raise CredentialsError(f"{TRUST_FILE} holds no PEM certificate") from None
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
    except ValueError:
        raise CredentialsError(f"{CERT_FILE} is not a PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(bundle.key, password=None)
    except (ValueError, TypeError):
        raise CredentialsError(f"{KEY_FILE} is not an unencrypted PEM private key") from None
    if key.public_key() != cert.public_key():
        raise CredentialsError(f"{KEY_FILE} does not belong to the certificate in {CERT_FILE}")
    if not any(_issued_by(cert, ca) for ca in cas):
        raise CredentialsError(
            f"the certificate in {CERT_FILE} is not signed by a CA in {TRUST_FILE}"
        )
    expires = cert.not_valid_after_utc
    if not cert.not_valid_before_utc <= now <= expires:
        start = cert.not_valid_before_utc
        raise CredentialsError(
            f"the certificate in {CERT_FILE} is valid from {start:%Y-%m-%d %H:%M} to "
            f"{expires:%Y-%m-%d %H:%M} UTC, not now ({now:%Y-%m-%d %H:%M} UTC)"
        )
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        raise CredentialsError(f"the certificate in {CERT_FILE} names no DNS SAN") from None
    dns = names.value.get_values_for_type(x509.DNSName)
    if not dns:
        raise CredentialsError(f"the certificate in {CERT_FILE} names no DNS SAN")
    return dns[0], expires


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def read_bundle(directory: Path) -> tuple[CredentialBundle, dict[str, Path]]:
    """The three files' bytes, and the resolved paths they were read from (a mounted
    Secret's timestamped directory: it never changes in place)."""
    paths: dict[str, Path] = {}
    contents: dict[str, bytes] = {}
    for name in FILES:
        try:
            paths[name] = Path(os.path.realpath(directory / name))
            contents[name] = paths[name].read_bytes()
        except OSError as exc:
            raise CredentialsError(f"cannot read {directory / name}: {exc.strerror}") from None
    bundle = CredentialBundle(contents[TRUST_FILE], contents[CERT_FILE], contents[KEY_FILE])
    return bundle, paths


def build_material(bundle: CredentialBundle, paths: dict[str, Path], now: datetime) -> TlsMaterial:
    """Check ``bundle`` and build its TLS contexts (``paths``: where its files are)."""
    name, expires = check_bundle(bundle, now)
    try:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=bundle.trust.decode())
        server.verify_mode = ssl.CERT_REQUIRED
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=bundle.trust.decode())
        for context in (server, client):
            context.minimum_version = ssl.TLSVersion.TLSv1_3
            context.load_cert_chain(paths[CERT_FILE], paths[KEY_FILE])
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise CredentialsError(
            f"cannot build TLS contexts from {paths[CERT_FILE].parent}: {exc}"
        ) from None
    digest = hashlib.sha256(b"\0".join((bundle.trust, bundle.cert, bundle.key))).hexdigest()
    return TlsMaterial(bundle, name, digest[:16], expires, server, client)


def load_material(directory: Path, now: datetime) -> TlsMaterial:
    bundle, paths = read_bundle(directory)
    try:
        return build_material(bundle, paths, now)
    except CredentialsError as exc:
        raise CredentialsError(f"credentials in {directory}: {exc}") from None


def write_bundle(directory: Path, bundle: CredentialBundle) -> None:
    """Write ``bundle`` as a credentials directory only its owner can read."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for name, data in zip(FILES, (bundle.trust, bundle.cert, bundle.key), strict=True):
        path = directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def identity_dir(directory: Path, identity: Identity) -> Path:
    """Where ``write_identities`` puts the credentials of ``identity``."""
    return directory / identity.value


def write_identities(directory: Path, issued: Issued) -> None:
    """Each role's credentials (the CA, its certificate and key) in its own directory
    under ``directory`` (``worker/``, ``frontend/``), all readable by their owner only,
    so each process can be given only its own."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for identity in Identity:
        write_bundle(identity_dir(directory, identity), CredentialBundle.of(issued, identity))


def utc_now() -> datetime:
    return datetime.now(UTC)


class CredentialStore:
    """The current credentials of one directory, re-read when its files change.

    Thread-safe: gRPC asks for server credentials from its own threads."""

    def __init__(
        self,
        directory: Path,
        *,
        refresh_s: float = DEFAULT_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        """Loads the files now; raises CredentialsError if they are unusable."""
        self.directory = directory
        self._refresh_s = refresh_s
        self._clock = clock
        self._now = now
        self._lock = threading.Lock()
        self._material = load_material(directory, now())
        self._stamp = self._file_stamp()
        self._checked = clock()

    def current(self) -> TlsMaterial:
        """The newest consistent credentials (looks at the files every ``refresh_s``)."""
        with self._lock:
            if self._clock() - self._checked >= self._refresh_s:
                self._checked = self._clock()
                self._reload_if_changed()
            return self._material

    def _file_stamp(self) -> tuple[tuple[str, int, int], ...]:
        stamp = []
        for name in FILES:
            try:
                real = os.path.realpath(self.directory / name)
                info = os.stat(real)
            except OSError:
                return ()
            stamp.append((real, info.st_mtime_ns, info.st_size))
        return tuple(stamp)

    def _reload_if_changed(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        try:
            material = load_material(self.directory, self._now())
        except CredentialsError as exc:
            logger.warning("keeping the current credentials: %s", exc)
            return  # _stamp unchanged: look again next time
        self._stamp = stamp
        if material.fingerprint != self._material.fingerprint:
            logger.info(
                "credentials in %s changed (%s -> %s): new connections use them",
                self.directory,
                self._material.fingerprint,
                material.fingerprint,
            )
            self._material = material


# Alerted on by the chart's rules (charts/tandem/monitoring/rules.yaml).
CERTIFICATE_EXPIRY = "tandem_credentials_certificate_expiry_timestamp_seconds"


def register_expiry_metric(registry: CollectorRegistry, store: CredentialStore) -> None:
    """Export when the certificate this process presents expires, as it is now: a
    certificate the operator renewed shows up once the kubelet has updated the mount."""
    Gauge(
        CERTIFICATE_EXPIRY,
        "Expiry (notAfter, Unix seconds) of the certificate this member presents (tls.crt).",
        registry=registry,
    ).set_function(lambda: store.current().not_after.timestamp())
