"""``tandem profile -f FILE [-o TABLE]``: measure the engine an InferenceCluster runs, on
this machine, into a step-time table (``tandem.perf-table/v1``) that ``tandem plan
--perf-table TABLE`` plans from.

The engine is built as the spec's decode workers build it (engine options merged with the
decode pool's, the model source), so the table holds for that configuration on this
machine's CPUs; run it where the workers run. The reference engine is the one measured
today (the others have step-time databases). Progress goes to stderr; the table to
``-o`` or, without it, to stdout.

Exit codes: 0 measured, 2 invalid input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from tandem.api.v1alpha1 import EngineKind, InferenceCluster, PoolRole
from tandem.api.validate import ManifestError, load_file
from tandem.cli.manifest_files import add_files_option, print_manifest_errors
from tandem.cli.plan_workload import positive_int
from tandem.engines.base import EngineError
from tandem.engines.reference import ReferenceEngine
from tandem.engines.reference.shape import describe_worker, fits_pool
from tandem.engines.trtllm.config import pool_engine_options
from tandem.perf.profile import (
    LONGEST_PROMPT,
    REPEATS,
    ProfileError,
    compute_profile_grid,
    render_profile_table,
)
from tandem.perf.profiler import describe_host, measure_engine

EXIT_INVALID = 2


def cmd_profile(args: argparse.Namespace) -> int:
    clusters: list[InferenceCluster] = []
    for name in args.files:
        try:
            clusters += [o for o in load_file(name) if isinstance(o, InferenceCluster)]
        except ManifestError as exc:
            print_manifest_errors(exc)
            return EXIT_INVALID
    if len(clusters) != 1:
        print(f"error: give exactly one InferenceCluster, found {len(clusters)}", file=sys.stderr)
        return EXIT_INVALID
    spec = clusters[0].spec
    if spec.engine.kind is not EngineKind.REFERENCE:
        print(
            f"error: spec.engine.kind: tandem profile measures the reference engine, not "
            f"{spec.engine.kind.value!r} (simulated and trtllm plans read step-time databases)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        engine = ReferenceEngine.from_options(
            pool_engine_options(spec, PoolRole.DECODE), spec.model.source
        )
        config = engine.config
        grid = compute_profile_grid(
            config.max_context,
            lambda batch, tokens: fits_pool(config, batch, tokens),
            longest_prompt=args.longest_prompt,
            repeats=args.repeats,
        )
    except (EngineError, ProfileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    host = describe_host()
    _say(
        f"{config.model_name} on {host}: prompts {list(grid.prompts)}, batches "
        f"{list(grid.batches)}, {grid.repeats} repeats each"
    )
    measured = measure_engine(engine, grid, progress=_say)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    source = (
        f"tandem profile, {today}: reference engine (config {config.digest()}, "
        f"{config.blas_threads} BLAS thread) on {host}, median of {grid.repeats}"
    )
    table = render_profile_table(
        grid, measured, model=spec.model.name, engine=EngineKind.REFERENCE.value,
        accelerator=spec.accelerator.profile.value, source=source,
        worker=describe_worker(config, engine.model.weights),
    )  # fmt: skip
    text = json.dumps(table, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        _say(f"wrote {args.output}")
    return 0


def _say(line: str) -> None:
    print(f"tandem profile: {line}", file=sys.stderr, flush=True)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile",
        help="measure the reference engine's step times on this machine into a table "
        "that `tandem plan --perf-table` plans from",
    )
    add_files_option(p, help="the InferenceCluster whose engine to measure")
    p.add_argument(
        "-o", "--output", type=Path, metavar="TABLE", help="write the table here (default: stdout)"
    )
    p.add_argument(
        "--longest-prompt",
        type=positive_int,
        default=LONGEST_PROMPT,
        metavar="TOKENS",
        help="the longest prompt to prefill and decode context to step at; the table "
        "extends linearly past it",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=REPEATS,
        help="measurements per point (the table holds their median)",
    )
    p.set_defaults(handler=cmd_profile)
