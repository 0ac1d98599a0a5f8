"""``make soak`` (``python -m tandem_dev.bench --only soak``): 10 minutes at twice the measured
capacity of a local cluster (tandem_dev.faults.soak)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tandem_dev.faults.soak import render_soak, run_soak

SECONDS, WARMUP_S = 600.0, 120.0


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tandem-soak-") as tmp:
        result = run_soak(Path(tmp), SECONDS, WARMUP_S)
    print(render_soak(result))
    print(
        f"\n`tandem up` of the reference example's shape (1 prefill + 1 decode worker, KV "
        f"over NIXL on loopback, `maxQueuedRequests: 16`, a 32 MiB KV pool); capacity is "
        f"the answers per second of 8 closed-loop clients in the same run, then arrivals "
        f"came open-loop at {result.offered_rps / result.capacity_rps:.0f}x that, half of "
        f"them long prompts prefilled remotely, half streamed, 60 s deadline. The "
        f"frontend's queue bounds what waits before a worker; admitted requests also wait "
        f"in the workers' own queues and batches, so their latency is bounded by both, "
        f"not by the frontend queue alone. Growth compares the medians of the first and "
        f"last tenth of the 5 s samples under load after warm-up (and the tenth around "
        f"half-time); descriptors and threads are flat when they are back to their "
        f"level before the load 10 s after it stopped. The machine was shared with other "
        f"jobs, which lowers capacity for all rows alike. Processes restarted during the "
        f"run: {result.restarts}; arrivals skipped by the client's in-flight bound: "
        f"{result.skipped}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
