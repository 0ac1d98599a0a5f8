"""Cluster credentials: a per-cluster CA, mutual TLS between members, and where
plaintext is still allowed (docs/security.md)."""

from tandem.security.credentials import (
    CredentialsError,
    CredentialStore,
    TlsMaterial,
    identity_dir,
    write_bundle,
    write_identities,
)
from tandem.security.identity import Identity
from tandem.security.listeners import check_plaintext_bind, is_loopback
from tandem.security.pki import CredentialBundle, issue, server_name

__all__ = [
    "CredentialBundle",
    "CredentialStore",
    "CredentialsError",
    "Identity",
    "TlsMaterial",
    "check_plaintext_bind",
    "identity_dir",
    "is_loopback",
    "issue",
    "server_name",
    "write_bundle",
    "write_identities",
]
