"""`tandem up` / `status` / `down` with real processes on 127.0.0.1.

Workers here are ``tandem_dev.doubles.null_worker`` processes (the real gRPC API, no model)
so that the runtime's own behaviour -- start-up, readiness, state, restarts, scaling,
stopping without orphans -- is tested quickly, on the random test model's tokenizer;
test_openai_reference.py runs the reference engine with the example's model, SmolLM2.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
import yaml

from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.devcluster.ports import allocate_ports
from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.runtime.drainer import open_sync_channel
from tandem.runtime.plan import count_workers, plan_local
from tandem.runtime.state import Phase, cluster_dir, read_state
from tandem.runtime.supervisor import Supervisor, frontend_ready
from tandem.security import CredentialStore

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "reference-cpu.yaml"
RANDOM_MODEL = Path(__file__).with_name("random-model.yaml")  # the null workers' tokenizer
NULL_WORKER = "tandem_dev.doubles.null_worker"
CLI = (
    "import argparse, sys\n"
    "from tandem.cli import local\n"
    "parser = argparse.ArgumentParser(prog='tandem')\n"
    "local.register(parser.add_subparsers(required=True))\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.handler(args))\n"
)


def write_cluster(tmp_path: Path, name: str = "itest", **spec: Any) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["model"] = yaml.safe_load(RANDOM_MODEL.read_text())
    for path, value in spec.items():
        node = doc["spec"]
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    target = tmp_path / f"{name}.yaml"
    target.write_text(yaml.safe_dump(doc))
    return target


def tandem(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        env={**os.environ, "TANDEM_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def wait_for(check: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def recorded_pids(home: Path, name: str) -> list[int]:
    state = read_state(cluster_dir(name, home))
    assert state is not None
    return [p.pid for p in [state.frontend, *state.workers] if p is not None]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    tandem(home, "down", "--all")


def test_up_detach_status_openai_down(tmp_path: Path, home: Path) -> None:
    spec = write_cluster(tmp_path, **{"prefill.replicas": 2, "decode.replicas": 1})
    (port,) = allocate_ports(1)
    up = tandem(home, "up", "-f", str(spec), "--port", str(port), "--detach",
                "--worker-module", NULL_WORKER)  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    assert "prefill-1" in up.stdout and "endpoint: http://127.0.0.1:" in up.stdout
    assert "no API keys: the endpoint listens on 127.0.0.1 only" in up.stdout
    # Said once, with how to stop a detached cluster (Ctrl-C no longer reaches it); and
    # the supervisor's "ready" line is relayed before `up` returns.
    assert up.stdout.count("endpoint: ") == 1 and "Ctrl-C" not in up.stdout, up.stdout
    assert f"ready: http://127.0.0.1:{port}/v1" in up.stdout, up.stdout

    status = tandem(home, "status", "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["endpoint"].startswith("http://127.0.0.1:")
    assert {p: (doc["pools"][p]["replicas"], doc["pools"][p]["ready"]) for p in doc["pools"]} == {
        "prefill": (2, 2),
        "decode": (1, 1),
    }
    assert "ready" in tandem(home, "status").stdout

    client = openai.OpenAI(base_url=doc["endpoint"], api_key="unused", max_retries=0)
    long_prompt = "long " * 20  # over the example's minPrefillTokens=32: remote prefill
    chat = client.chat.completions.create(
        model="reference", messages=[{"role": "user", "content": long_prompt}], max_tokens=4
    )
    assert chat.choices[0].finish_reason == "length" and chat.usage is not None
    streamed = client.chat.completions.create(
        model="reference",
        messages=[{"role": "user", "content": long_prompt}],
        max_tokens=4,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == chat.choices[0].message.content
    legacy = client.completions.create(model="reference", prompt="hi", max_tokens=3)
    legacy_stream = client.completions.create(
        model="reference", prompt="hi", max_tokens=3, stream=True
    )
    assert "".join(c.choices[0].text for c in legacy_stream) == legacy.choices[0].text

    # The cluster talks mutual TLS with the credentials `tandem up` issued for it.
    state = read_state(cluster_dir("itest", home))
    assert state is not None
    credentials = cluster_dir("itest", home) / "credentials"
    assert oct(credentials.stat().st_mode & 0o777) == "0o700"
    for worker in state.workers:
        address = f"127.0.0.1:{worker.port}"
        with grpc.insecure_channel(address) as plaintext:
            stub = worker_pb2_grpc.WorkerStub(plaintext)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as refused:
                stub.Health(pb.HealthRequest(), timeout=5)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        # Each role has its own pair (only workers may pull KV: test_worker_roles.py).
        for role in ("worker", "frontend"):
            assert oct((credentials / role).stat().st_mode & 0o777) == "0o700"
            with open_sync_channel(address, CredentialStore(credentials / role)) as member:
                stub = worker_pb2_grpc.WorkerStub(member)  # type: ignore[no-untyped-call]
                assert stub.Health(pb.HealthRequest(), timeout=5).worker_id

    pids = recorded_pids(home, "itest")
    again = tandem(home, "up", "-f", str(spec), "--detach")
    assert again.returncode == 1
    assert again.stderr == (
        f"error: cluster 'itest' is already running (pid {doc['supervisor']['pid']}, port "
        f"{port}): use it, or `tandem down --name itest` first\n"
    )
    down = tandem(home, "down", "--name", "itest")
    assert down.returncode == 0, down.stderr
    wait_for(lambda: not any(alive(p) for p in pids), within=20)
    assert read_state(cluster_dir("itest", home)) is None
    assert tandem(home, "status").returncode == 1

    # The port is free at once: the connections the frontend just closed (TIME_WAIT) do
    # not count as "in use".
    up = tandem(home, "up", "-f", str(spec), "--port", str(port), "--detach",
                "--worker-module", NULL_WORKER)  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    assert tandem(home, "down", "--name", "itest").returncode == 0


def _foreground(home: Path, spec: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tandem.runtime", "-f", str(spec), "--port", "0",
         "--worker-module", NULL_WORKER],
        env={**os.environ, "TANDEM_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal of its own: Ctrl-C goes to it alone
        # and SIGINT at its default, as in a terminal: a suite run as a background job of
        # a non-interactive shell (`make test &`) has SIGINT ignored, which a child
        # inherits and Python then keeps: the supervisor would ignore this Ctrl-C.
        preexec_fn=functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def _wait_running(home: Path, name: str = "itest") -> None:
    def running() -> bool:
        state = read_state(cluster_dir(name, home))
        return state is not None and state.phase is Phase.RUNNING

    wait_for(running, within=60)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_foreground_stops_everything_on_signal(tmp_path: Path, home: Path, sig: int) -> None:
    spec = write_cluster(tmp_path)
    process = _foreground(home, spec)
    try:
        _wait_running(home)
        pids = recorded_pids(home, "itest")
        os.killpg(process.pid, sig)  # what a terminal's Ctrl-C does
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "stopped" in output
    assert not any(alive(p) for p in pids)


def test_killed_supervisor_leaves_no_orphans(tmp_path: Path, home: Path) -> None:
    spec = write_cluster(tmp_path)
    process = _foreground(home, spec)
    try:
        _wait_running(home)
        pids = recorded_pids(home, "itest")
        process.kill()  # SIGKILL: no cleanup code runs; the kernel's death signal does
        process.wait(timeout=10)
        wait_for(lambda: not any(alive(p) for p in pids), within=30)
    finally:
        if process.poll() is None:
            process.kill()


class MembersWatch:
    """Poll a membership file from a thread: every distinct view of its entries."""

    def __init__(self, path: Path) -> None:
        self.first = {m["address"] for m in json.loads(path.read_text())["workers"]}
        self.views: list[set[tuple[str, bool]]] = []
        self._path, self._done = path, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.wait(0.01):
            with contextlib.suppress(OSError, ValueError):
                workers = json.loads(self._path.read_text())["workers"]
                view = {
                    (m["address"], bool(m.get("starting")))
                    for m in workers
                    if m["address"] not in self.first
                }
                if not self.views or self.views[-1] != view:
                    self.views.append(view)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def test_supervisor_restarts_dead_workers_and_scales(tmp_path: Path) -> None:
    spec = write_cluster(tmp_path, **{"prefill.replicas": 1, "prefill.maxReplicas": 3})
    cluster = load_inference_cluster(spec)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    plan = plan_local(
        cluster,
        state_dir=state_dir,
        frontend_port=allocate_ports(1)[0],
        worker_ports=allocate_ports(count_workers(cluster)),
        python=sys.executable,
        worker_module=NULL_WORKER,
    )
    lines: list[str] = []
    supervisor = Supervisor(plan, cluster, progress=lines.append, python=sys.executable)
    phases: list[Phase | None] = []

    def before_running() -> None:
        state = read_state(state_dir)
        phases.append(state.phase if state is not None else None)

    try:
        supervisor.start(before_running=before_running)
        state = read_state(state_dir)
        assert state is not None
        # The launcher starts its autoscaler here: every worker is up, the state not yet
        # running, so no reader sees a running cluster without its record.
        assert phases == [Phase.STARTING] and state.phase is Phase.RUNNING
        first = next(w for w in state.workers if w.name == "prefill-0")
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: not alive(first.pid))
        deadline = time.monotonic() + 30

        def restarted() -> bool:
            supervisor.supervise(lambda: time.monotonic() > deadline, interval_s=0.05)
            now = read_state(state_dir)
            assert now is not None
            pids = {w.name: w.pid for w in now.workers}
            return pids.get("prefill-0", first.pid) != first.pid

        supervisor.supervise(lambda: restarted() or time.monotonic() > deadline, interval_s=0.1)
        assert any("prefill-0 exited" in line for line in lines)

        # New workers are in the file as starting while they start, so the router knows
        # capacity is on its way, and as ready once they are.
        seen = MembersWatch(plan.members_file)
        supervisor.scale(PoolRole.PREFILL, 3)
        seen.stop()
        members = json.loads(plan.members_file.read_text())["workers"]
        assert sum(m["role"] == "prefill" for m in members) == 3
        assert not any(m.get("starting") for m in members)
        new = {m["address"] for m in members} - seen.first
        assert len(new) == 2
        assert any(v == {(a, True) for a in new} for v in seen.views), seen.views
        assert supervisor.pool_size(PoolRole.PREFILL) == 3
        supervisor.scale(PoolRole.PREFILL, 1)
        members = json.loads(plan.members_file.read_text())["workers"]
        assert [m["role"] for m in members].count("prefill") == 1
        assert frontend_ready(plan.endpoint)
    finally:
        supervisor.stop()
    final = read_state(state_dir)
    assert final is not None and final.phase is Phase.STOPPING
    assert not any(alive(w.pid) for w in final.workers)
