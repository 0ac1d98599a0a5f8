"""API key records and the store that reads them from mounted Secrets."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tandem.frontend.api_keys import (
    KEY_PREFIX,
    KeyStore,
    dump_record,
    hash_key,
    new_key,
    new_record,
    parse_record,
    read_records,
)

KEY = "tdm_" + "a" * 43


def write(directory: Path, key_id: str, tenant: str, key: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / key_id).write_text(dump_record(new_record(key_id, tenant, key)))


def test_a_key_is_random_and_only_its_hash_is_stored() -> None:
    one, two = new_key(), new_key()
    assert one != two and one.startswith(KEY_PREFIX) and len(one) == len(KEY_PREFIX) + 43
    record = new_record("team-a-1", "team-a", one, now=datetime(2026, 12, 6, tzinfo=UTC))
    text = dump_record(record)
    assert one not in text
    assert json.loads(text) == {
        "tenant": "team-a",
        "sha256": hash_key(one),
        "created": "2026-12-06T00:00:00Z",
    }
    assert parse_record("team-a-1", text) == record


def test_sha256_of_a_known_key_matches_hashlib_reference() -> None:
    # echo -n abc | sha256sum
    assert hash_key("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("key_id", "text", "says"),
    [
        ("k1", "not json", "not a key record"),
        ("k1", "[1]", "expected a JSON object"),
        ("k1", '{"tenant": "Team A", "sha256": "' + "0" * 64 + '"}', "tenant must be"),
        ("k1", '{"tenant": "a", "sha256": "abc"}', "sha256 must be"),
        ("k1", '{"sha256": "' + "0" * 64 + '"}', "tenant must be"),
        ("Bad_Id", '{"tenant": "a", "sha256": "' + "0" * 64 + '"}', "key id 'Bad_Id'"),
    ],
)
def test_a_malformed_record_is_refused_saying_what_is_wrong(
    key_id: str, text: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        parse_record(key_id, text)


def test_new_record_refuses_a_tenant_that_is_not_a_dns_label() -> None:
    with pytest.raises(ValueError, match="tenant 'team_a'"):
        new_record("k1", "team_a", KEY)


def test_a_mounted_secret_is_read_without_its_kubelet_machinery(tmp_path: Path) -> None:
    """The kubelet's layout: items are symlinks into ..data, a symlink to a dated dir."""
    mount = tmp_path / "0"
    dated = mount / "..2026_12_06_13_00_00.123"
    write(dated, "team-a-1", "team-a", KEY)
    os.symlink(dated.name, mount / "..data")
    os.symlink("..data/team-a-1", mount / "team-a-1")
    snapshot = read_records([mount, tmp_path / "missing"])
    assert snapshot.tenants_by_hash == {hash_key(KEY): "team-a"}
    assert snapshot.invalid == ()


def test_the_store_adds_revokes_and_names_bad_items_on_reload(tmp_path: Path) -> None:
    old, new = new_key(), new_key()
    write(tmp_path / "0", "old", "team-a", old)
    store = KeyStore([tmp_path / "0", tmp_path / "1"])
    assert store.reload() is True
    assert store.tenant_for(old) == "team-a" and store.tenant_for(new) is None
    assert store.reload() is False  # nothing changed

    write(tmp_path / "1", "new", "team-b", new)  # a second Secret, mounted later
    (tmp_path / "0" / "junk").write_text("hello")
    assert store.reload() is True
    assert store.tenant_for(new) == "team-b"
    assert store.key_count == 2 and store.invalid_count == 1

    (tmp_path / "0" / "old").unlink()  # revoked
    assert store.reload() is True
    assert store.tenant_for(old) is None and store.tenant_for(new) == "team-b"


def test_an_oversized_or_binary_item_is_skipped_not_fatal(tmp_path: Path) -> None:
    write(tmp_path, "good", "t", KEY)
    (tmp_path / "big").write_text("x" * 10_000)
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    snapshot = read_records([tmp_path])
    assert snapshot.tenants_by_hash == {hash_key(KEY): "t"}
    assert sorted(p.rsplit("/", 1)[-1].split(":")[0] for p in snapshot.invalid) == ["big", "bin"]
