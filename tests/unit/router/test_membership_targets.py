"""The frontend contract's worker targets: parsed up front, refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tandem.api.v1alpha1 import ModelSpec
from tandem.frontend.config import FrontendConfig
from tandem.router.membership import Member, parse_members, write_members
from tandem.router.policy import WorkerRole
from tandem.router.targets import membership_from_targets


def config(workers: dict[str, str | list[str]]) -> FrontendConfig:
    return FrontendConfig(model=ModelSpec(name="m"), workers=workers)


@pytest.mark.parametrize(
    "workers",
    [
        {"decode": "kubernetes:///ref-decode.serving:grpc"},
        {"decode": ["127.0.0.1:5001", "127.0.0.1:5002"], "prefill": "file:///tmp/members.json"},
    ],
)
def test_good_targets_load(workers: dict[str, str | list[str]]) -> None:
    assert config(workers).workers == workers


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ({"decoder": "127.0.0.1:5001"}, "unknown pool 'decoder'"),
        ({"decode": "dns:///ref-decode.serving.svc:50051"}, "expected HOST:PORT"),
        ({"decode": "kubernetes:///ref-decode:grpc"}, "SERVICE.NAMESPACE:PORT"),
        ({"decode": "file://relative/path"}, "ABSOLUTE"),
        ({"decode": ["127.0.0.1:5001", "127.0.0.1"]}, "expected HOST:PORT"),
    ],
)
def test_bad_targets_fail_when_the_document_loads(
    workers: dict[str, str | list[str]], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        config(workers)


async def test_static_and_file_targets_combine(tmp_path: Path) -> None:
    members_file = tmp_path / "members.json"
    write_members(
        members_file,
        [Member("127.0.0.1:6001", WorkerRole.PREFILL), Member("127.0.0.1:6002", WorkerRole.DECODE)],
    )
    source = membership_from_targets(
        {"prefill": f"file://{members_file}", "decode": ["127.0.0.1:5001"]}
    )
    try:
        got = await source.members()
    finally:
        await source.close()
    # The file is filtered to its pool; the fixed address joins it.
    assert set(got) == {
        Member("127.0.0.1:6001", WorkerRole.PREFILL),
        Member("127.0.0.1:5001", WorkerRole.DECODE),
    }


def test_starting_members_round_trip_through_the_file(tmp_path: Path) -> None:
    members = (
        Member("127.0.0.1:6001", WorkerRole.PREFILL, starting=True),
        Member("127.0.0.1:6002", WorkerRole.DECODE),
    )
    path = tmp_path / "members.json"
    write_members(path, members)
    document = json.loads(path.read_text())
    assert parse_members(document) == members
    # Ready entries keep the format older readers know.
    assert document["workers"][1] == {"address": "127.0.0.1:6002", "role": "decode"}


def test_a_malformed_starting_flag_is_refused() -> None:
    entry = {"address": "127.0.0.1:6001", "role": "prefill", "starting": "yes"}
    with pytest.raises(ValueError, match="starting must be true or false, got 'yes'"):
        parse_members({"workers": [entry]})
