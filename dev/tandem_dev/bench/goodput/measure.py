"""aiperf through the real stack: the prompts and tokenizer it reads, and one deployment
measured at several concurrencies (one cluster, one aiperf run each)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from tandem.tokenization.harmony import load_harmony_tokenizer
from tandem_dev.bench.goodput import grid
from tandem_dev.bench.goodput.aiperf import AiperfRun, parse_export, run_aiperf
from tandem_dev.bench.goodput.points import Point, Record, Split
from tandem_dev.bench.goodput.stack import read_pacing, render_cluster, run_cluster
from tandem_dev.bench.goodput.workload import write_client_tokenizer, write_prompts

log = logging.getLogger("tandem_dev.bench.goodput")


class Workspace:
    """A scratch directory: the clusters' home, aiperf's tokenizer, a prompt file per
    ISL, and a fresh artifact directory per aiperf run."""

    def __init__(self, root: Path, isls: Sequence[int]) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.tokenizer = write_client_tokenizer(root / "client-tokenizer")
        harmony = load_harmony_tokenizer()
        most = grid.count_requests(max(grid.MODEL_CONCURRENCY))
        self.prompts = {
            isl: write_prompts(root / f"prompts-{isl}.jsonl", harmony, isl=isl, osl=grid.OSL,
                               count=most)
            for isl in isls
        }  # fmt: skip
        self._runs = 0

    def artifacts(self) -> Path:
        self._runs += 1
        return self.root / f"aiperf-{self._runs}"


def measure(
    ws: Workspace, profile: str, isl: int, split: Split, concurrencies: Sequence[int],
    speedup: float, max_num_tokens: int | None = None,
) -> list[tuple[Point, list[Record]]]:  # fmt: skip
    """One cluster, aiperf at each concurrency: the point and the requests behind it; a
    failed run is left out and logged."""
    name = f"gp-{profile}-{split.prefill}p{split.decode}d"
    if max_num_tokens is not None:
        name += f"-{max_num_tokens}"
    document = render_cluster(name, profile, split, speedup, max_num_tokens)
    measured = []
    with run_cluster(ws.home, name, document) as endpoint:
        for c in concurrencies:
            requests = grid.count_requests(c)
            run = AiperfRun(
                url=endpoint.removesuffix("/v1"),
                prompts=ws.prompts[isl],
                tokenizer=ws.tokenizer,
                concurrency=c,
                requests=requests,
                ramp_s=grid.RAMP_MODELLED_S / speedup,
                artifacts=ws.artifacts(),
                timeout_s=max(120.0, 4 * 60.0 / speedup),
            )
            try:
                data, records = run_aiperf(run)
                point = parse_export(data, records, profile=profile, isl=isl, osl=grid.OSL,
                                     split=split, concurrency=c, speedup=speedup)  # fmt: skip
            except (RuntimeError, OSError, ValueError, KeyError) as exc:
                log.warning("aiperf %s %s %s c=%d failed: %s", profile, isl, split.name, c, exc)
                continue
            pacing = read_pacing(ws.home, name)
            lag = max((p.lag for p in pacing.values()), default=None)
            measured.append((dataclasses.replace(point, plumbing_lag=lag), records))
    return measured
