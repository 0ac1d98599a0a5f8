"""A cluster's own certificate authority and the two role certificates it signs.

Every InferenceCluster (and every ``tandem up`` cluster) gets its own CA. The CA signs
one certificate + key per role: the **worker** certificate every worker presents, and the
**frontend** certificate the frontends present (mutual TLS). Holding either one is
membership of the cluster; which one says what the holder may call (``security.identity``:
only workers may pull KV). The CA's private key signs those two certificates and is then
thrown away, so no file anywhere can mint another member; a rotation makes a new CA and
new certificates (``tandem_operator.render.credentials``).

Keys are ECDSA P-256 (fast to make, supported by gRPC's BoringSSL and by OpenSSL). Both
certificates name ``server_name(cluster)`` as their DNS SAN: peers dial pod IPs and
check that name instead (gRPC ``ssl_target_name_override``, ``ssl`` ``server_hostname``);
the role is a URI SAN (``identity_uri``). The clock is a parameter; randomness is the
OS's (key generation, serial numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tandem.security.identity import Identity, identity_uri

DEFAULT_LIFETIME = timedelta(days=365)
# Tolerates clocks a little behind the issuer's.
BACKDATE = timedelta(minutes=5)
SERVER_NAME_SUFFIX = "tandem.internal"


@dataclass(frozen=True, slots=True)
class Issued:
    """One CA certificate and the two role certificates + keys it signed (PEM):
    ``cert``/``key`` for workers, ``frontend_cert``/``frontend_key`` for frontends."""

    ca_cert: bytes
    cert: bytes
    key: bytes
    not_after: datetime
    frontend_cert: bytes
    frontend_key: bytes

    def pair(self, identity: Identity) -> tuple[bytes, bytes]:
        """The certificate and key of ``identity``."""
        if identity is Identity.FRONTEND:
            return self.frontend_cert, self.frontend_key
        return self.cert, self.key


@dataclass(frozen=True, slots=True)
class CredentialBundle:
    """What a member holds: the CAs it trusts, and the certificate + key it presents."""

    trust: bytes  # one or more CA certificates (PEM, concatenated)
    cert: bytes
    key: bytes

    @classmethod
    def of(cls, issued: Issued, identity: Identity = Identity.WORKER) -> CredentialBundle:
        """What a member of role ``identity`` holds right after ``issued``."""
        return cls(issued.ca_cert, *issued.pair(identity))


def server_name(cluster: str) -> str:
    """The DNS name in the member certificate of ``cluster`` (never resolved)."""
    return f"{cluster}.{SERVER_NAME_SUFFIX}"


def issue(cluster: str, now: datetime, lifetime: timedelta = DEFAULT_LIFETIME) -> Issued:
    """A fresh CA for ``cluster`` and its worker and frontend certificates, valid from
    ``now``."""
    not_before, not_after = now - BACKDATE, now + lifetime
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster} tandem CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    name = server_name(cluster)
    worker_cert, worker_key = _leaf(ca_key, ca_name, name, Identity.WORKER, not_before, not_after)
    frontend_cert, frontend_key = _leaf(
        ca_key, ca_name, name, Identity.FRONTEND, not_before, not_after
    )
    return Issued(
        ca_cert=ca.public_bytes(serialization.Encoding.PEM),
        cert=worker_cert,
        key=worker_key,
        not_after=not_after,
        frontend_cert=frontend_cert,
        frontend_key=frontend_key,
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    name: str,
    identity: Identity,
    not_before: datetime,
    not_after: datetime,
) -> tuple[bytes, bytes]:
    """A certificate for ``identity`` signed by ``ca_key`` and its key (PEM): DNS SAN
    ``name`` (what peers check), URI SAN naming the role (what they authorize)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName(name),
                    x509.UniformResourceIdentifier(identity_uri(name, identity)),
                ]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def join_pem(*certificates: bytes) -> bytes:
    """A trust bundle: the certificates, each ending in a newline, duplicates dropped."""
    seen: list[bytes] = []
    for cert in certificates:
        block = cert.strip() + b"\n"
        if block not in seen:
            seen.append(block)
    return b"".join(seen)


def split_pem(bundle: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, each as its own PEM block."""
    return [
        c.public_bytes(serialization.Encoding.PEM) for c in x509.load_pem_x509_certificates(bundle)
    ]


def not_after(cert: bytes) -> datetime:
    """When a PEM certificate expires (timezone-aware, UTC)."""
    return x509.load_pem_x509_certificate(cert).not_valid_after_utc
