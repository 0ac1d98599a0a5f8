"""Every mistake a newcomer makes on the command line: the real ``tandem`` program in a
subprocess answers with exactly one ``error: ...`` line on stderr that says what was wrong
and what to do, nothing on stdout, no traceback, and a non-zero exit status."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tandem.devcluster.ports import allocate_ports

TANDEM = Path(sys.executable).parent / "tandem"
EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "reference-cpu.yaml"
START_ONE = "start one with `tandem up -f FILE --detach`"


@dataclass
class Workspace:
    root: Path
    home: Path

    def file(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text)
        return path

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "TANDEM_HOME")}
        environ |= {"TANDEM_HOME": str(self.home), "HOME": str(self.root), **env}
        return subprocess.run(
            [str(TANDEM), *args],
            cwd=self.root,
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path, tmp_path / "tandem-home")


def one_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single line the command said, once the rest of the contract is checked."""
    assert result.returncode == code, result
    assert result.stdout == "", result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_manifest_mistakes(ws: Workspace) -> None:
    """Every command that reads -f FILE loads it the same way: one command per mistake."""
    missing = ws.root / "missing.yaml"
    assert one_error(ws.run("validate", "-f", str(missing)), 2) == (
        f"error: {missing}: cannot read: No such file or directory"
    )
    bad = ws.file("bad.yaml", "spec: [\n")
    assert one_error(ws.run("plan", "-f", str(bad)), 2) == (
        f"error: {bad}: malformed YAML: line 2, column 1: expected the node content, but "
        "found '<stream end>'"
    )
    other = ws.file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert one_error(ws.run("up", "-f", str(other)), 2) == (
        f"error: {other}: kind: must be InferenceCluster or WorkerPool, got 'ConfigMap'"
    )


def test_usage_mistakes_point_at_help(ws: Workspace) -> None:
    assert one_error(ws.run("up", "-f", str(EXAMPLE), "--bogus"), 2) == (
        "error: tandem: unrecognized arguments: --bogus (see `tandem --help`)"
    )
    assert one_error(ws.run("operator", "run", "--workers", "many"), 2) == (
        "error: tandem operator run: argument --workers: invalid int value: 'many' "
        "(see `tandem operator run --help`)"
    )
    assert one_error(ws.run("operator", "run", "--frontend-metrics-url", "prod"), 2) == (
        "error: --frontend-metrics-url: expected NAMESPACE/NAME=http://HOST:PORT or *=URL, "
        "got 'prod'"
    )


def test_no_local_cluster(ws: Workspace) -> None:
    for command in (["status"], ["ask", "hi"]):
        assert one_error(ws.run(*command), 1) == f"error: no local cluster is running: {START_ONE}"
    assert one_error(ws.run("status", "--name", "ghost"), 1) == (
        f"error: cluster 'ghost' is not running ({START_ONE})"
    )


def test_two_local_clusters_are_listed(ws: Workspace) -> None:
    for name in ("beta", "alpha"):  # what `tandem up` records (list_clusters reads these)
        (ws.home / "clusters" / name).mkdir(parents=True)
        (ws.home / "clusters" / name / "state.json").write_text("{}")
    assert one_error(ws.run("ask", "hi"), 1) == (
        "error: 2 local clusters are running: pass --name alpha or --name beta"
    )


def test_ask_an_endpoint_where_nothing_listens(ws: Workspace) -> None:
    (port,) = allocate_ports(1)
    url = f"http://127.0.0.1:{port}/v1"
    assert one_error(ws.run("ask", "hi", "--endpoint", url), 1) == (
        f"error: nothing answers at {url} ([Errno 111] Connection refused); is it running?"
    )


def test_up_with_a_worker_module_this_python_cannot_import(ws: Workspace) -> None:
    for module in ("tandem_workers_nowhere", "tandem.no_such_worker", "nowhere.at.all"):
        line = one_error(ws.run("up", "-f", str(EXAMPLE), "--worker-module", module), 2)
        said = re.fullmatch(
            f"error: --worker-module {re.escape(module)}: no such module for (\\S+) "
            r"\(install the package that provides it into this environment\)",
            line,
        )
        assert said is not None, line
        assert Path(said.group(1)).parent == TANDEM.parent  # the interpreter tandem runs on
    assert not (ws.home / "clusters").exists()  # nothing was started or recorded


def test_up_with_a_table_nothing_plans_from_or_that_is_no_table(ws: Workspace) -> None:
    planned = EXAMPLE.with_name("reference-cpu-planned.yaml")
    missing = ws.root / "missing.json"
    assert one_error(ws.run("up", "-f", str(planned), "--perf-table", str(missing)), 2) == (
        f"error: --perf-table: cannot read performance table {missing}: No such file or directory"
    )
    wrong = ws.file("wrong.json", '{"format": "tandem.perf-table/v1"}')
    line = one_error(ws.run("up", "-f", str(planned), "--perf-table", str(wrong)), 2)
    assert line.startswith(f"error: --perf-table: performance table {wrong}: "), line
    assert one_error(ws.run("up", "-f", str(EXAMPLE), "--perf-table", str(wrong)), 2) == (
        "error: --perf-table: spec.planning.mode is off, so nothing plans from a table (set "
        "it to check or auto)"
    )
    assert not (ws.home / "clusters").exists()  # nothing was started or recorded


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_up_on_a_taken_port(ws: Workspace, listener: int) -> None:
    line = one_error(ws.run("up", "-f", str(EXAMPLE), "--port", str(listener), "--detach"), 1)
    assert line.startswith(f"error: port {listener} on 127.0.0.1 is in use by pid {os.getpid()} (")
    assert line.endswith("): stop it, or pass --port N (0 picks a free one)")


def test_crds_check_outside_the_repository(ws: Workspace) -> None:
    assert one_error(ws.run("crds", "--check"), 1) == (
        f"error: missing under {ws.root}: manifests/crds/tandem.dev_inferenceclusters.yaml, "
        "manifests/crds/tandem.dev_workerpools.yaml, "
        "charts/tandem/crds/tandem.dev_inferenceclusters.yaml, "
        "charts/tandem/crds/tandem.dev_workerpools.yaml; run it in the repository root or "
        "pass --root DIR (`tandem crds --write` writes them)"
    )


KUBECONFIG_HINT = (
    "pass --kubeconfig FILE or set KUBECONFIG (for a dev cluster: export "
    "KUBECONFIG=$(tandem dev cluster up))"
)


def test_operator_without_a_usable_kubeconfig(ws: Workspace) -> None:
    missing = ws.root / "kubeconfig"
    assert one_error(ws.run("operator", "run", "--kubeconfig", str(missing)), 1) == (
        f"error: no kubeconfig at {missing}: {KUBECONFIG_HINT}"
    )
    # `export KUBECONFIG=$(a command that printed nothing)`
    assert one_error(ws.run("operator", "run", KUBECONFIG=""), 1) == (
        f"error: no kubeconfig at $KUBECONFIG (set, but empty): {KUBECONFIG_HINT}"
    )
    assert one_error(ws.run("operator", "run"), 1) == (
        f"error: no kubeconfig at ~/.kube/config: {KUBECONFIG_HINT}"
    )
    broken = ws.file("broken", "clusters: [\n")
    assert one_error(ws.run("operator", "run", "--kubeconfig", str(broken)), 1).startswith(
        f"error: kubeconfig {broken}: while parsing a flow node expected the node content"
    )


def unreachable_kubeconfig(ws: Workspace) -> Path:
    """A well-formed kubeconfig for an API server nobody runs (a free loopback port)."""
    (port,) = allocate_ports(1)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return ws.file("unreachable.kubeconfig", yaml.safe_dump(config))


def test_operator_on_a_taken_metrics_port(ws: Workspace, listener: int) -> None:
    kubeconfig = unreachable_kubeconfig(ws)
    args = ["operator", "run", "--kubeconfig", str(kubeconfig), "--metrics-port", str(listener)]
    line = one_error(ws.run(*args), 1)
    assert line.startswith(f"error: port {listener} on 127.0.0.1 is in use by pid {os.getpid()} (")
    assert line.endswith("): stop it, or pass --metrics-port N")


def test_importing_images_before_building_them_or_without_a_real_node(ws: Workspace) -> None:
    assert one_error(ws.run("dev", "cluster", "import", "build/images/tandem.tar"), 1) == (
        "error: no image archive at build/images/tandem.tar: `make images` builds "
        "build/images/*.tar"
    )
    archive = ws.file("tandem.tar", "")
    state = ws.home / "devcluster"
    assert one_error(ws.run("dev", "cluster", "import", str(archive)), 1) == (
        f"error: no dev cluster with a real node in {state}: start one with "
        f"`tandem dev cluster up --nodes real --state-dir {state}`"
    )


def test_crds_apply_without_a_reachable_cluster(ws: Workspace) -> None:
    missing = ws.root / "none.kubeconfig"
    assert one_error(ws.run("crds", "apply", "--kubeconfig", str(missing)), 1) == (
        f"error: no kubeconfig at {missing} (set KUBECONFIG or --kubeconfig)"
    )
    line = one_error(ws.run("crds", "apply", "--kubeconfig", str(unreachable_kubeconfig(ws))), 1)
    assert line.startswith("error: cannot apply the CRDs: Cannot connect to host 127.0.0.1:")
    assert one_error(ws.run("crds", "apply", "--check"), 2) == (
        "error: `tandem crds apply` takes neither --write nor --check"
    )
