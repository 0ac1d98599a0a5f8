"""Shared by the integration tests: worker processes started and stopped for a test,
``tandem up --detach`` clusters brought up and down, and SIGKILLing a worker while
requests stream in."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tandem.api.validate import load_inference_cluster
from tandem.runtime.launcher import detach, down
from tandem.runtime.plan import WORKER_MODULE
from tandem.runtime.state import cluster_dir, read_state
from tandem.security import CredentialBundle, CredentialStore, issue, write_bundle
from tandem.worker.client import WorkerClient

_DECISION = re.compile(
    r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$',
    flags=re.MULTILINE,
)

WORKER_START_TIMEOUT_S = 240.0


@dataclass
class KillOutcome:
    """What the clients saw, and the router's prefill decisions afterwards."""

    statuses: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # seconds, one per request
    decisions: dict[str, float] = field(default_factory=dict)  # "path/reason" -> count


def _decision_counts(base: str) -> dict[str, float]:
    """``tandem_router_prefill_decisions_total`` from the frontend at ``base`` (no /v1)."""
    text = httpx.get(f"{base}/metrics").text
    return {f"{path}/{reason}": float(v) for path, reason, v in _DECISION.findall(text)}


def _kill_mid_traffic(
    endpoint: str,
    pid: int,
    *,
    total: int,
    concurrency: int,
    kill_after: int,
    body_for: Callable[[int], dict[str, Any]],
    timeout_s: float,
) -> KillOutcome:
    """Send ``total`` chat requests from ``concurrency`` clients; SIGKILL ``pid`` just
    before request number ``kill_after`` goes out. ``body_for(n)`` is request n's body."""
    outcome = KillOutcome()

    async def drive() -> None:
        sent = 0
        async with httpx.AsyncClient(base_url=endpoint, timeout=timeout_s) as client:

            async def one() -> None:
                nonlocal sent
                while sent < total:
                    sent += 1
                    if sent == kill_after:
                        os.kill(pid, signal.SIGKILL)
                    body = body_for(sent)
                    started = time.monotonic()
                    response = await client.post("/chat/completions", json=body)
                    outcome.latencies.append(time.monotonic() - started)
                    outcome.statuses.append(response.status_code)

            await asyncio.gather(*(one() for _ in range(concurrency)))

    asyncio.run(drive())
    outcome.decisions = _decision_counts(endpoint.removesuffix("/v1"))
    return outcome


@pytest.fixture
def kill_mid_traffic() -> Callable[..., KillOutcome]:
    """``kill_mid_traffic(endpoint, pid, total=, concurrency=, kill_after=, body_for=,
    timeout_s=) -> KillOutcome`` (a fixture because test modules cannot import each other)."""
    return _kill_mid_traffic


class WorkerProcess:
    """One ``python -m tandem.worker`` that printed ``READY <port>``, with a client to it.

    ``stop_grace_s``: how long ``stop`` lets it drain after SIGTERM before SIGKILL; None
    kills it straight away."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        port: int,
        log: Path,
        stop_grace_s: float | None,
        credentials: CredentialStore | None = None,
    ) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.stop_grace_s = stop_grace_s
        self.client = WorkerClient(
            f"127.0.0.1:{port}", timeout_s=30.0, decode_timeout_s=60.0, credentials=credentials
        )

    async def stop(self) -> None:
        await self.client.close()
        if self.proc.returncode is None:
            if self.stop_grace_s is None:
                self.proc.kill()
            else:
                self.proc.terminate()
                try:
                    await asyncio.wait_for(self.proc.wait(), self.stop_grace_s)
                except TimeoutError:
                    self.proc.kill()
        await self.proc.wait()


class WorkerLauncher:
    """Starts worker processes, waits for each one's READY line, and stops them all."""

    def __init__(self) -> None:
        self.started: list[WorkerProcess] = []

    async def start(
        self,
        worker_id: str,
        args: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str],
        stop_grace_s: float | None = None,
        credentials: Path | None = None,
        launcher: Sequence[str] = (),
    ) -> WorkerProcess:
        """``python -m tandem.worker *args`` with stderr in ``log``; fails with the log's
        tail if it exits before serving. ``credentials``: the cluster's directory, for the
        worker (``--credentials``) and the test's client (mutual TLS). ``launcher``: a
        command that execs the worker command after it (``tandem.worker.ray_launch``)."""
        if credentials is not None:
            args = [*args, f"--credentials={credentials}"]
        with log.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                *launcher,
                sys.executable,
                "-m",
                "tandem.worker",
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=dict(env),
            )
        assert proc.stdout is not None
        try:
            # A liveness bound, not a speed check: SmolLM2 loads in ~10 s alone, but three
            # workers loading at once on a loaded 2-core machine took 74 s.
            async with asyncio.timeout(WORKER_START_TIMEOUT_S):
                while True:
                    line = (await proc.stdout.readline()).decode()
                    if not line:
                        text = await asyncio.to_thread(log.read_text)
                        raise AssertionError(f"{worker_id} exited early:\n{text[-3000:]}")
                    if line.startswith("READY "):
                        break
        except BaseException:  # not serving in time: leave no process behind
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            raise
        store = CredentialStore(credentials) if credentials is not None else None
        worker = WorkerProcess(proc, int(line.split()[1]), log, stop_grace_s, store)
        self.started.append(worker)
        return worker

    async def stop_all(self) -> None:
        for worker in self.started:
            await worker.stop()


@pytest.fixture
def cluster_credentials(tmp_path: Path) -> Path:
    """A fresh CA and member certificate in ``tmp_path/credentials``, as ``tandem up``
    writes them."""
    directory = tmp_path / "credentials"
    write_bundle(directory, CredentialBundle.of(issue("integration", datetime.now(UTC))))
    return directory


@pytest.fixture
async def worker_launcher() -> AsyncIterator[WorkerLauncher]:
    """A ``WorkerLauncher`` whose workers are stopped after the test (a fixture because
    test modules cannot import each other)."""
    launcher = WorkerLauncher()
    yield launcher
    await launcher.stop_all()


class DetachedClusters:
    """Local clusters started as ``tandem up --detach`` does, under one ``TANDEM_HOME``
    in ``directory``; ``down_all`` stops every one that was asked for."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.home = directory / "home"
        self.names: list[str] = []

    def up(self, doc: Mapping[str, Any], *, worker_module: str = WORKER_MODULE) -> str:
        """Start the InferenceCluster ``doc`` (a parsed manifest); its endpoint once ready."""
        name = doc["metadata"]["name"]
        self.names.append(name)
        path = self.directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(dict(doc)))
        lines: list[str] = []
        code = detach(path, load_inference_cluster(path), port=0, progress=lines.append,
                      home=self.home, timeout_s=600, worker_module=worker_module)  # fmt: skip
        assert code == 0, "\n".join(lines)
        state = read_state(cluster_dir(name, self.home))
        assert state is not None
        return state.endpoint

    def up_all(self, docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Start ``docs`` side by side (most of a start-up is workers loading weights);
        endpoints by cluster name."""
        with ThreadPoolExecutor(len(docs)) as starting:
            futures = {d["metadata"]["name"]: starting.submit(self.up, d) for d in docs}
            return {name: future.result() for name, future in futures.items()}

    def down_all(self) -> None:
        for name in self.names:  # one that never started is "not running": nothing to do
            down(name, progress=lambda _: None, home=self.home)


@pytest.fixture(scope="module")
def module_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetachedClusters]:
    """``DetachedClusters`` shared by a module's tests, stopped after the last one."""
    clusters = DetachedClusters(tmp_path_factory.mktemp("clusters"))
    yield clusters
    clusters.down_all()


@pytest.fixture
def detached_clusters(tmp_path: Path) -> Iterator[DetachedClusters]:
    """``DetachedClusters`` of one test, stopped after it."""
    clusters = DetachedClusters(tmp_path)
    yield clusters
    clusters.down_all()
