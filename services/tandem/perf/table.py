"""A measured clock: step times a user recorded on their own GPUs, interpolated.

File format (JSON, ``tandem.perf-table/v1``)::

    {
      "format": "tandem.perf-table/v1",
      "model": "gpt-oss-120b",          # informational: what was measured
      "accelerator": "b200",
      "tensor_parallel_size": 1,
      "source": "trtllm-bench 1.2.0, 2026-11-02, kv fp8",
      "prefill": [[1024, 0.012], [8192, 0.05], [32768, 0.33]],
      "decode": {
        "batch":   [1, 16, 64],
        "context": [1024, 8192, 32768],
        "seconds": [[0.0022, 0.0023, 0.0025],
                    [0.0060, 0.0071, 0.0095],
                    [0.0107, 0.0131, 0.0165]]
      },
      "kv_transfer_bytes_per_second": 4.25e10,  # optional; else the profile's link
      "worker": {...}                           # optional: see below
    }

* ``prefill``: ``[prompt_tokens, seconds]`` pairs, strictly increasing in tokens: the time
  to prefill one prompt of that length alone, from an empty cache. A chunk of ``n``
  tokens after ``c`` cached ones then costs ``P(c + n) - P(c)``, where ``P`` interpolates
  the pairs linearly (through ``P(0) = 0``, extended past the last pair along the last
  segment), so attention's growth with context is whatever the measurement shows.
* ``decode``: the time of one decode step for ``batch`` sequences whose mean context is
  ``context`` tokens, on a grid (``seconds[i][j]`` for ``batch[i]``, ``context[j]``),
  interpolated bilinearly and extended linearly beyond the grid (never below the grid's
  edge, and flat below its first row and column), like Dynamo's mocker
  reads its measured ITL table.
* A step with both decode rows and prefill chunks costs the decode time plus the chunks'
  time (what a table of separate measurements can say; the analytic model prices a
  mixed step as one).
* ``worker`` (``tandem profile`` writes it): the measured engine as a planner needs it
  where no capacity model sizes it -- a CPU engine, whose KV pool its own options
  preallocate and whose model shape only its weights file knows. ``architecture`` holds
  the fields of ``tandem.capacity.models.ModelArchitecture``; ``kv_pool_bytes`` the pool;
  ``tokens_per_block`` its block; ``max_num_tokens`` the tokens a step with decode rows
  computes at most.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tandem.capacity.models import ModelArchitecture
from tandem.perf.model import Chunk

FORMAT = "tandem.perf-table/v1"


class PerfTableError(ValueError):
    """The table file is missing, unreadable or malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class MeasuredWorker:
    """The ``worker`` object (module docstring)."""

    architecture: ModelArchitecture
    kv_pool_bytes: int
    tokens_per_block: int
    max_num_tokens: int


@dataclass(frozen=True, slots=True)
class PerfTable:
    prefill_tokens: tuple[float, ...]
    prefill_seconds: tuple[float, ...]
    decode_batch: tuple[float, ...]
    decode_context: tuple[float, ...]
    decode_seconds: tuple[tuple[float, ...], ...]
    kv_transfer_bytes_per_second: float | None = None
    source: str = ""
    model: str = ""  # what was measured, if the table says
    worker: MeasuredWorker | None = None

    def prefill_to(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` tokens from empty (``P`` in the docstring)."""
        return _interpolate((0.0, *self.prefill_tokens), (0.0, *self.prefill_seconds), tokens)

    def decode_step(self, decode_contexts: Sequence[int]) -> float:
        if not decode_contexts:
            return 0.0
        batch = float(len(decode_contexts))
        context = sum(decode_contexts) / batch
        rows = [_interpolate(self.decode_context, row, context) for row in self.decode_seconds]
        return _interpolate(self.decode_batch, tuple(rows), batch)

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        prefill = sum(self.prefill_to(c.cached + c.new) - self.prefill_to(c.cached) for c in chunks)
        return self.decode_step(decode_contexts) + prefill


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise linear through (xs, ys); past the last point along the last segment, but
    never below the last measurement, and flat below the first. Noisy measurements (a
    batch that happened to step faster than a smaller one) would otherwise extrapolate a
    step time that falls with load, down to zero."""
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    i = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    value = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return max(ys[-1], value) if x > xs[-1] else value


def load_perf_table(path: str | Path) -> PerfTable:
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PerfTableError(f"cannot read performance table {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise PerfTableError(f"performance table {path} is not JSON: {exc}") from exc
    try:
        return parse_perf_table(document)
    except PerfTableError as exc:
        raise PerfTableError(f"performance table {path}: {exc}") from exc


def parse_perf_table(document: Any) -> PerfTable:
    if not isinstance(document, dict):
        raise PerfTableError("the document must be a JSON object")
    if document.get("format") != FORMAT:
        raise PerfTableError(f"format must be {FORMAT!r}, got {document.get('format')!r}")
    pairs = document.get("prefill")
    if not isinstance(pairs, list) or not pairs:
        raise PerfTableError("prefill must be a non-empty list of [tokens, seconds] pairs")
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise PerfTableError("prefill must be a non-empty list of [tokens, seconds] pairs")
    tokens = _numbers("prefill tokens", [p[0] for p in pairs], increasing=True)
    seconds = _numbers("prefill seconds", [p[1] for p in pairs])
    decode = document.get("decode")
    if not isinstance(decode, dict):
        raise PerfTableError("decode must be an object with batch, context and seconds")
    batch = _numbers("decode.batch", decode.get("batch"), increasing=True)
    context = _numbers("decode.context", decode.get("context"), increasing=True)
    grid = decode.get("seconds")
    if not isinstance(grid, list) or len(grid) != len(batch):
        raise PerfTableError(f"decode.seconds must have one row per batch ({len(batch)})")
    rows = []
    for i, row in enumerate(grid):
        values = _numbers(f"decode.seconds[{i}]", row)
        if len(values) != len(context):
            raise PerfTableError(
                f"decode.seconds[{i}] must have one value per context ({len(context)})"
            )
        rows.append(values)
    link = document.get("kv_transfer_bytes_per_second")
    if link is not None and (not _is_number(link) or link <= 0):
        raise PerfTableError("kv_transfer_bytes_per_second must be a positive number")
    worker = document.get("worker")
    return PerfTable(
        tokens,
        seconds,
        batch,
        context,
        tuple(rows),
        None if link is None else float(link),
        str(document.get("source", "")),
        str(document.get("model", "")),
        None if worker is None else _parse_worker(worker),
    )


_ARCHITECTURE = TypeAdapter(ModelArchitecture)


def render_worker(worker: MeasuredWorker) -> dict[str, Any]:
    """The ``worker`` object as the table file holds it (JSON-ready)."""
    architecture: dict[str, Any] = _ARCHITECTURE.dump_python(worker.architecture, mode="json")
    return {
        "architecture": architecture,
        "kv_pool_bytes": worker.kv_pool_bytes,
        "tokens_per_block": worker.tokens_per_block,
        "max_num_tokens": worker.max_num_tokens,
    }


def _parse_worker(worker: object) -> MeasuredWorker:
    if not isinstance(worker, dict):
        raise PerfTableError("worker must be an object (architecture, kv_pool_bytes, ...)")
    try:
        architecture = _ARCHITECTURE.validate_python(worker.get("architecture"))
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in ("worker.architecture", *problem["loc"]))
        raise PerfTableError(f"{where}: {problem['msg']}") from None
    return MeasuredWorker(
        architecture,
        _count(worker, "kv_pool_bytes"),
        _count(worker, "tokens_per_block"),
        _count(worker, "max_num_tokens"),
    )


def _count(worker: dict[str, object], name: str) -> int:
    value = worker.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PerfTableError(f"worker.{name} must be a positive integer")
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(name: str, values: object, *, increasing: bool = False) -> tuple[float, ...]:
    if not isinstance(values, list) or not values:
        raise PerfTableError(f"{name} must be a non-empty list of numbers")
    if not all(_is_number(v) and v > 0 for v in values):
        raise PerfTableError(f"{name} must hold positive numbers only")
    out = tuple(float(v) for v in values)
    if increasing and any(b <= a for a, b in itertools.pairwise(out)):
        raise PerfTableError(f"{name} must be strictly increasing")
    return out
