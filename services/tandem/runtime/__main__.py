"""``python -m tandem.runtime -f FILE [--port N] [--perf-table T] [--otlp-endpoint URL]``: a
foreground supervisor (what ``tandem up --detach`` starts in the background)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tandem.api.validate import ManifestError, load_inference_cluster
from tandem.runtime.launcher import LaunchError, run_foreground
from tandem.runtime.plan import WORKER_MODULE
from tandem.runtime.tracing_flags import add_tracing_flags, apply_tracing_flags


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem.runtime")
    parser.add_argument("-f", "--filename", required=True, type=Path)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--worker-module", default=WORKER_MODULE, help="worker program")
    parser.add_argument("--perf-table", type=Path, help="step-time table plans are made from")
    parser.add_argument(
        "--detached",
        action="store_true",
        help="started by `tandem up --detach`, which says where the endpoint is",
    )
    add_tracing_flags(parser)
    args = parser.parse_args(argv)
    try:
        cluster = apply_tracing_flags(load_inference_cluster(args.filename), args)
        port = cluster.spec.frontend.port if args.port is None else args.port
        return run_foreground(
            cluster,
            port=port,
            progress=lambda line: print(line, flush=True),
            worker_module=args.worker_module,
            perf_table=args.perf_table.read_text() if args.perf_table else None,
            detached=args.detached,
        )
    except (ManifestError, LaunchError, ValueError, OSError) as exc:
        print(f"error: {exc}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
