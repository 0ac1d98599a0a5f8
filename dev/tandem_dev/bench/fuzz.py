"""``python -m tandem_dev.bench --only fuzz``: 10,000 generated HTTP requests
(tandem_dev.faults.fuzz) against a frontend of a local cluster (real processes, null
workers)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tandem_dev.faults.fuzz import fuzz_frontend
from tandem_dev.faults.local import running_cluster
from tandem_dev.faults.scenarios import fault_cluster

EXAMPLES = 10_000


def main() -> int:
    doc = fault_cluster("fuzz").to_wire()
    with (
        tempfile.TemporaryDirectory(prefix="tandem-fuzz-") as tmp,
        running_cluster(doc, Path(tmp), worker_module="tandem_dev.doubles.null_worker") as state,
    ):
        report = fuzz_frontend(state.endpoint.removesuffix("/v1"), "reference", EXAMPLES)
    fives = sum(n for code, n in report.statuses.items() if code >= 500)
    print("| requests | answers by status | 5xx | 4xx not OpenAI-shaped | serving after | time |")
    print("|---|---|---|---|---|---|")
    statuses = ", ".join(f"{code}: {n}" for code, n in report.statuses.items())
    print(f"| {report.examples} | {statuses} | {fives} | 0 | "
          f"{'yes' if report.serving_after else 'NO'} | {report.seconds:.0f} s |")  # fmt: skip
    print(
        "\nMethods, paths (known, unknown, trailing slash, escapes), queries, content types "
        "and bodies (random bytes and text, random JSON, valid chat/completion bodies with "
        "fields replaced by random JSON or extreme numbers, `stream: true` read to the "
        "end) drawn by hypothesis; any 5xx, a 4xx that is not an OpenAI error object, or "
        "a reply without `x-request-id` stops the run (it would be shrunk and shown here). "
        "`make test` sends 300 through the same strategies."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
