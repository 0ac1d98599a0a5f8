"""The fault suite's pure pieces: the namespace bed's plan, outcome classification, the
table."""

from __future__ import annotations

import httpx
import openai
import pytest

from tandem_dev.faults.load import Outcome, RequestRecord, classify_error, is_openai_error_body
from tandem_dev.faults.netbed import partition_rules, plan_bed, setup_commands
from tandem_dev.faults.report import render_table, summarize
from tandem_dev.faults.scenarios import decisions_note, streams_spanning

REQUEST = httpx.Request("POST", "http://f/v1/chat/completions")


def test_the_bed_stays_on_its_own_private_subnet() -> None:
    plan = plan_bed(4242, 1, 70, ["prefill-0", "decode-0"])
    assert plan.gateway == "10.213.70.1"
    assert [h.address for h in plan.hosts] == ["10.213.70.10", "10.213.70.11"]
    assert all(
        len(h.veth) <= 15 and h.namespace.startswith("tandem-fault-4242-1-") for h in plan.hosts
    )
    commands = [" ".join(c) for c in setup_commands(plan)]
    assert not any("route" in c or "default" in c or "MASQUERADE" in c for c in commands)
    with pytest.raises(ValueError):
        plan_bed(4242, 1, 7, ["x"])  # the real test node's /24


def test_a_partition_drops_both_directions_inside_one_namespace() -> None:
    plan = plan_bed(1, 0, 64, ["prefill-0", "decode-0"])
    assert partition_rules(plan, "prefill-0", "decode-0") == [
        ["INPUT", "-s", "10.213.64.11", "-j", "DROP"],
        ["OUTPUT", "-d", "10.213.64.11", "-j", "DROP"],
    ]


def status_error(status: int, body: object) -> openai.APIStatusError:
    response = httpx.Response(status, request=REQUEST)
    return openai.APIStatusError("x", response=response, body=body)


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (status_error(503, {"message": "no worker", "type": "server_error"}), Outcome.CLEAN_ERROR),
        (status_error(502, "<html>bad gateway</html>"), Outcome.LOST),
        (openai.APIError("gone", REQUEST, body={"message": "gone", "type": "server_error"}),
         Outcome.CLEAN_ERROR),
        (openai.APIError("?", REQUEST, body=None), Outcome.LOST),
        (openai.APIConnectionError(request=REQUEST), Outcome.DROPPED),
        (httpx.RemoteProtocolError("peer closed"), Outcome.DROPPED),
        (openai.APITimeoutError(REQUEST), Outcome.HUNG),
        (TimeoutError(), Outcome.HUNG),
        (ValueError("garbled"), Outcome.LOST),
    ],
)  # fmt: skip
def test_every_failure_is_one_outcome(exc: BaseException, outcome: Outcome) -> None:
    assert classify_error(exc)[0] is outcome


def test_an_openai_error_body_needs_a_message_and_a_type() -> None:
    assert is_openai_error_body({"message": "m", "type": "t", "param": None, "code": None})
    assert not is_openai_error_body({"message": "", "type": "t"})
    assert not is_openai_error_body({"detail": "Not Found"})


def record(i: int, outcome: Outcome, start: float, end: float, first: float | None = None,
           stream: bool = True) -> RequestRecord:  # fmt: skip
    return RequestRecord(i, stream, start, end, outcome, first)


def test_the_streams_a_kill_catches_are_the_ones_mid_way_at_it() -> None:
    records = [
        record(0, Outcome.CLEAN_ERROR, 0.0, 5.2, first=1.0),  # cut
        record(1, Outcome.ANSWERED, 0.0, 6.0, first=1.0),  # went on (migrated, or elsewhere)
        record(2, Outcome.CLEAN_ERROR, 4.0, 5.5, first=None),  # no token yet
        record(3, Outcome.CLEAN_ERROR, 0.0, 5.1, first=1.0, stream=False),
        record(4, Outcome.ANSWERED, 0.0, 4.9, first=1.0),  # ended before the kill
    ]
    assert [r.index for r in streams_spanning(records, at=5.0)] == [0, 1]


def test_counts_and_table() -> None:
    records = [record(0, Outcome.ANSWERED, 0, 1), record(1, Outcome.DROPPED, 0, 1)]
    result = summarize("frontend replica SIGKILL", records, 4.25, "note", sent_while_down=3)
    assert (result.sent, result.answered, result.dropped, result.lost) == (2, 1, 1, 0)
    table = render_table([result])
    assert "| frontend replica SIGKILL | 2 | 1 | 0 | 1 | 0 | 0 | 4.2 s | note |" in table


def test_decisions_note_lists_what_changed() -> None:
    from collections import Counter

    before = Counter({"remote/long_prompt": 5})
    after = Counter({"remote/long_prompt": 6, "local/prefill_failed": 3})
    assert decisions_note(before, after) == "local/prefill_failed 3, remote/long_prompt 1"
