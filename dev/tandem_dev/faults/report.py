"""The fault suite's results and the table ``make bench`` writes to docs/benchmarks.md
(pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tandem_dev.faults.load import Outcome, RequestRecord


@dataclass(frozen=True, slots=True)
class FaultResult:
    fault: str
    sent: int
    answered: int
    clean_errors: int
    dropped: int
    lost: int
    hung: int
    recover_s: float | None
    note: str
    records: tuple[RequestRecord, ...] = ()
    # What the fault did, for the tests' assertions (e.g. "kv_pulls_cut").
    facts: Mapping[str, float] = field(default_factory=dict)


def summarize(
    fault: str,
    records: Sequence[RequestRecord],
    recover_s: float | None,
    note: str,
    **facts: float,
) -> FaultResult:
    """Counts by outcome (pure)."""
    counts = Counter(r.outcome for r in records)
    return FaultResult(
        fault, len(records), counts[Outcome.ANSWERED], counts[Outcome.CLEAN_ERROR],
        counts[Outcome.DROPPED], counts[Outcome.LOST], counts[Outcome.HUNG], recover_s, note,
        tuple(records), facts,
    )  # fmt: skip


HEADER = (
    "| fault | sent | answered | clean OpenAI error | connection dropped | lost | hung "
    "| recovered in | what happened |\n|---|---|---|---|---|---|---|---|---|"
)


def render_table(rows: Sequence[FaultResult]) -> str:
    lines = [HEADER]
    for r in rows:
        recover = "-" if r.recover_s is None else f"{r.recover_s:.1f} s"
        lines.append(
            f"| {r.fault} | {r.sent} | {r.answered} | {r.clean_errors} | {r.dropped} "
            f"| {r.lost} | {r.hung} | {recover} | {r.note} |"
        )
    return "\n".join(lines)
