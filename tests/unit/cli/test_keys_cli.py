"""``tandem keys``: the pure edits of the key Secret and the command's own errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tandem.cli.keys import KeysError, new_key_id, records, with_key, without_key
from tandem.cli.main import main
from tandem.frontend.api_keys import KEY_ID, KeyRecord, hash_key, new_record

NOW = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)


def test_a_key_id_names_its_tenant_and_day_and_stays_a_dns_label() -> None:
    key_id = new_key_id("team-a", NOW)
    assert key_id.startswith("team-a-20261206-") and KEY_ID.fullmatch(key_id)
    long = new_key_id("t" * 63, NOW)
    assert len(long) <= 63 and KEY_ID.fullmatch(long)


def test_adding_keeps_every_other_key_and_refuses_a_duplicate_id() -> None:
    first = new_record("a-1", "a", "tdm_one", now=NOW)
    data = with_key({}, first)
    data = with_key(data, new_record("b-1", "b", "tdm_two", now=NOW))
    assert sorted(data) == ["a-1", "b-1"]
    assert json.loads(data["a-1"])["sha256"] == hash_key("tdm_one")
    with pytest.raises(KeysError, match="'a-1' exists already"):
        with_key(data, first)


def test_revoking_removes_one_key_and_names_the_known_ones_when_absent() -> None:
    data = with_key({}, new_record("a-1", "a", "tdm_one", now=NOW))
    assert without_key(data, "a-1") == {}
    with pytest.raises(KeysError, match=r"no key with id 'a-2' \(keys: a-1\)"):
        without_key(data, "a-2")


def test_listing_shows_records_and_names_items_the_frontends_ignore() -> None:
    data = with_key({"junk": "hello"}, new_record("a-1", "a", "tdm_one", now=NOW))
    rows = records(data)
    assert isinstance(rows[0], KeyRecord) and rows[0].tenant == "a"
    assert isinstance(rows[1], str) and rows[1].startswith("junk: not a key record")


def test_a_bad_tenant_or_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "add", "c", "--tenant", "Team_A"]) == 1
    assert capsys.readouterr().err.startswith("error: tenant 'Team_A' must be lowercase")
    missing = str(tmp_path / "nope")
    assert main(["keys", "list", "c", "--kubeconfig", missing]) == 1
    assert capsys.readouterr().err == (
        f"error: no kubeconfig at {missing} (set KUBECONFIG or --kubeconfig)\n"
    )
