"""API keys: how a key is made, how it is stored (hashed), and who it belongs to.

A key is ``tdm_`` and 43 URL-safe characters (32 random bytes). It is shown once, when
it is made; what is stored is a *record*, one per Secret item (file), named by the key's
id::

    {"tenant": "team-a", "sha256": "<64 hex digits>", "created": "2026-12-06T13:00:00Z"}

A SHA-256 of a 256-bit random key needs no salt or slow hash: nothing short of the key
itself finds a preimage, and a fast hash keeps the check off the request's latency.
``KeyStore`` reads every record under the directories it is given (mounted Secrets,
which the kubelet refreshes in place) and re-reads them when their content changes, so
keys are added, revoked and rotated without a restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

logger = logging.getLogger(__name__)

KEY_PREFIX = "tdm_"
# Secret item names are [-._a-zA-Z0-9]+; a key id is also a file name.
KEY_ID = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?")
TENANT = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# A record is a few hundred bytes; anything much larger is not one.
MAX_RECORD_BYTES = 4096


def secret_name(cluster: str) -> str:
    """The Secret ``tandem keys`` manages for ``cluster``; its frontends always read it
    (it need not exist)."""
    return f"{cluster}-api-keys"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    tenant: str
    sha256: str
    created: str = ""


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_record(key_id: str, tenant: str, key: str, *, now: datetime | None = None) -> KeyRecord:
    """The record of ``key``; ValueError naming what is malformed."""
    check_name("key id", key_id, KEY_ID)
    check_name("tenant", tenant, TENANT)
    created = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return KeyRecord(key_id=key_id, tenant=tenant, sha256=hash_key(key), created=created)


def dump_record(record: KeyRecord) -> str:
    return json.dumps(
        {"tenant": record.tenant, "sha256": record.sha256, "created": record.created},
        separators=(",", ":"),
    )


def parse_record(key_id: str, text: str) -> KeyRecord:
    """A record read from the item ``key_id``; ValueError saying what is wrong."""
    check_name("key id", key_id, KEY_ID)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{key_id}: not a key record (JSON: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{key_id}: not a key record (expected a JSON object)")
    tenant, digest = data.get("tenant"), data.get("sha256")
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise ValueError(f"{key_id}: tenant must be a DNS label, got {tenant!r}")
    if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest):
        raise ValueError(f"{key_id}: sha256 must be 64 lowercase hex digits")
    created = data.get("created", "")
    return KeyRecord(key_id, tenant, digest, created if isinstance(created, str) else "")


def check_name(what: str, value: str, pattern: re.Pattern[str]) -> None:
    if not pattern.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} must be lowercase letters, digits and '-' "
            "(a DNS label: at most 63 characters, starting and ending alphanumeric)"
        )


@dataclass(frozen=True, slots=True)
class KeySnapshot:
    """What one read of the directories found."""

    tenants_by_hash: dict[str, str]
    invalid: tuple[str, ...]  # "dir/item: why", one per unreadable or malformed item
    signature: tuple[tuple[str, str], ...]  # (path, content) of every item: change test


def read_records(directories: Sequence[Path]) -> KeySnapshot:
    """Every record under ``directories`` (the top-level files of each; a mounted
    Secret's ``..data`` machinery is skipped). A missing directory holds no keys."""
    tenants: dict[str, str] = {}
    invalid: list[str] = []
    signature: list[tuple[str, str]] = []
    for directory in directories:
        try:
            entries = sorted(p for p in directory.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            continue
        for path in entries:
            try:
                if path.stat().st_size > MAX_RECORD_BYTES:
                    raise ValueError(f"{path.name}: larger than {MAX_RECORD_BYTES} bytes")
                text = path.read_text()
                signature.append((str(path), text))
                record = parse_record(path.name, text)
            except UnicodeDecodeError:
                invalid.append(f"{path}: not UTF-8 text")
                continue
            except ValueError as exc:  # its message starts with the item's name
                invalid.append(f"{directory}/{exc}")
                continue
            except OSError as exc:
                invalid.append(f"{path}: {exc.strerror or exc}")
                continue
            tenants[record.sha256] = record.tenant
    return KeySnapshot(tenants, tuple(invalid), tuple(signature))


class KeyStore:
    """The keys a frontend accepts, re-read from ``directories`` when they change.

    ``reload`` swaps in a complete new table or keeps the old one: a request sees one
    consistent set. Revoking a key is removing its record; it stops working at the next
    reload after the kubelet refreshes the mounted Secret."""

    def __init__(self, directories: Sequence[Path]) -> None:
        self._directories = tuple(directories)
        self._snapshot = KeySnapshot({}, (), ())
        self._loaded = False

    def reload(self) -> bool:
        """Read the directories; True when the records changed (or on the first read)."""
        snapshot = read_records(self._directories)
        if self._loaded and snapshot.signature == self._snapshot.signature:
            return False
        before = set(self._snapshot.tenants_by_hash)
        self._snapshot, first = snapshot, not self._loaded
        self._loaded = True
        after = set(snapshot.tenants_by_hash)
        tenants = len(set(snapshot.tenants_by_hash.values()))
        if first:
            logger.info("API keys: %d keys of %d tenants", len(after), tenants)
        else:
            logger.info(
                "API keys reloaded: %d keys of %d tenants (%d added, %d revoked)",
                len(after),
                tenants,
                len(after - before),
                len(before - after),
            )
        for problem in snapshot.invalid:
            logger.warning("API keys: ignoring %s", problem)
        if not after:
            logger.warning(
                "no API keys: every request gets 401 until one is added "
                "(tandem keys add CLUSTER --tenant NAME)"
            )
        return True

    def tenant_for(self, key: str) -> str | None:
        """The tenant ``key`` belongs to, or None for an unknown or revoked key."""
        return self._snapshot.tenants_by_hash.get(hash_key(key))

    @property
    def key_count(self) -> int:
        return len(self._snapshot.tenants_by_hash)

    @property
    def invalid_count(self) -> int:
        return len(self._snapshot.invalid)
