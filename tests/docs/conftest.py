"""Docs as tests: the command blocks of README.md and docs/*.md, read with a Markdown
parser (markdown-it-py) and run as a reader would run them.

A fenced block is *runnable* when its info string is ``sh``, ``bash``, ``shell``,
``console`` or ``python``. Each runnable block is preceded by one HTML comment saying how
it is covered:

* ``<!-- doc-test: SEQUENCE -->``: the suite runs it as part of SEQUENCE, with the other
  blocks of that sequence in the same file, in file order, in one bash process (so an
  ``export`` carries over, as in a reader's terminal);
* ``<!-- doc-test: SEQUENCE, in a second terminal until "TEXT" -->``: the same, started in
  the background (the reader's second terminal: it inherits the first one's environment,
  like the docs' ``KUBECONFIG=$(...)`` prefixes reproduce it) and waited for until it
  prints TEXT; it runs until the next second-terminal block of the run replaces it
  (Ctrl-C, then the next command) or the run ends;
* ``<!-- illustrative: REASON -->``: not run, and why (it needs a GPU, a registry, ...).

Every fence carries an info string (``text`` for output and diagrams), so a shell block
cannot hide as a bare fence. ``test_doc_blocks.py`` checks all of this; the tests named in
:data:`RUN_BY` run the sequences.

What the harness changes, and only this: ``.venv/bin`` first on ``PATH`` (README.md tells
the reader to ``export PATH="$PWD/.venv/bin:$PATH"``), a fresh ``TANDEM_HOME`` and no
``KUBECONFIG`` (a new machine's shell). ``make`` targets run as written (after ``make
test`` installed the venv, ``make demo`` finds it up to date). ``console`` blocks run each
``$ `` command and compare its output with the lines the block shows, ``...`` standing
for any text.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
RUNNABLE = frozenset({"sh", "bash", "shell", "console", "python"})

# Which test runs each sequence ("FILE#SEQUENCE"); a marked sequence missing here fails.
_LOCAL = "tests/docs/test_docs_local.py::"
_K8S = "tests/docs/test_docs_kubernetes.py::"
RUN_BY: dict[str, str] = {
    "README.md#local": _LOCAL + "test_readme_quickstart",
    "docs/gpu-deployment.md#plan": _LOCAL + "test_gpu_deployment_plan",
    "docs/simulated-engine.md#quickstart": _LOCAL + "test_simulated_engine_quickstart",
    "docs/simulated-engine.md#profile": _LOCAL + "test_reference_profile_and_plan",
    "docs/operator.md#planned": _LOCAL + "test_local_planned_cluster",
    "docs/monitoring.md#rules": _LOCAL + "test_monitoring_rules",
    "README.md#simulated": _K8S + "test_readme_simulated_cluster",
    "docs/gpu-deployment.md#deploy": _K8S + "test_gpu_deployment",
    "docs/operator.md#out-of-cluster": _K8S + "test_operator_recipe",
    "docs/security.md#rotate": _K8S + "test_operator_recipe",
    "README.md#real-node": _K8S + "test_journey_on_the_real_node",
    "docs/port-forward.md#journey": _K8S + "test_journey_on_the_real_node",
    "docs/images.md#real-node": _K8S + "test_journey_on_the_real_node",
}

_MARKER = re.compile(r"^<!--\s*(doc-test|illustrative):\s*(.*?)\s*-->\s*$", re.DOTALL)
_BACKGROUND = re.compile(r'^(?P<sequence>[\w-]+), in a second terminal until "(?P<until>[^"]+)"$')
_SEQUENCE = re.compile(r"^[\w-]+$")


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced block and the marker before it (None: no marker)."""

    path: str  # relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str | None  # "doc-test" | "illustrative"
    detail: str  # the sequence (and background clause), or the reason

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def sequence(self) -> str | None:
        if self.marker != "doc-test":
            return None
        found = _BACKGROUND.match(self.detail)
        return found["sequence"] if found else self.detail

    @property
    def until(self) -> str | None:
        """For a second-terminal block: the text it prints once it is ready."""
        found = _BACKGROUND.match(self.detail) if self.marker == "doc-test" else None
        return found["until"] if found else None

    def problem(self) -> str | None:
        """Why this block breaks the rules above; None when it keeps them."""
        if not self.lang:
            return f"{self.where}: a fence without an info string (use `text` for output)"
        if self.lang not in RUNNABLE:
            return None
        if self.marker is None:
            return (
                f"{self.where}: a {self.lang} block neither run nor marked: put "
                "<!-- doc-test: SEQUENCE --> or <!-- illustrative: REASON --> right before it"
            )
        if self.marker == "illustrative" and not self.detail:
            return f"{self.where}: an illustrative block must say why it is not run"
        if self.marker == "doc-test":
            sequence = self.sequence or ""
            if not _SEQUENCE.match(sequence):
                return f"{self.where}: unreadable doc-test marker {self.detail!r}"
            if f"{self.path}#{sequence}" not in RUN_BY:
                return f"{self.where}: no test runs sequence {self.path}#{sequence} (RUN_BY)"
        return None


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with the HTML comment right before it, if any."""
    rel = path.relative_to(REPO).as_posix()
    tokens = MarkdownIt("commonmark").parse(path.read_text())
    blocks: list[Block] = []
    previous = None
    for token in tokens:
        if token.type == "fence" and token.map is not None:
            marker, detail = None, ""
            if previous is not None and previous.type == "html_block":
                found = _MARKER.match(previous.content.strip())
                if found:
                    marker, detail = found[1], found[2]
            lang = token.info.strip().split(" ")[0] if token.info.strip() else ""
            blocks.append(Block(rel, token.map[0] + 1, lang, token.content, marker, detail))
        if token.level == 0 and token.nesting >= 0:
            previous = token
    return blocks


def sequence_blocks(path: str, sequence: str) -> list[Block]:
    blocks = [b for b in read_blocks(REPO / path) if b.sequence == sequence]
    assert blocks, f"no block of {path} is marked doc-test: {sequence}"
    return blocks


# ---------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Command:
    """One ``$ `` command of a console block and the output the block shows for it."""

    block: Block
    text: str
    expected: str


def console_commands(block: Block) -> list[Command]:
    commands: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        i += 1
        output: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        commands.append(Command(block, "\n".join(command), "\n".join(output).strip("\n")))
    return commands


def output_matches(expected: str, actual: str) -> bool:
    """``actual`` is what ``expected`` shows, ``...`` standing for any text (lines too)."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    clean = "\n".join(line.rstrip() for line in actual.strip("\n").splitlines())
    return re.fullmatch(pattern, clean, flags=re.DOTALL) is not None


def _script(blocks: Sequence[Block], out: Path) -> tuple[str, list[tuple[Command, Path]]]:
    """One bash script running ``blocks`` in order; the console commands whose output is
    compared afterwards, with the file each one's output lands in."""
    parts = [
        "set -eo pipefail",
        f"cd {shlex.quote(str(REPO))}",
        # The reader's second terminal closes with the session.
        "DOC_TERMINAL=",
        """trap 'if [ -n "$DOC_TERMINAL" ]; then kill -- -"$DOC_TERMINAL" || true; fi' EXIT""",
    ]
    compared: list[tuple[Command, Path]] = []
    for n, block in enumerate(blocks):
        parts.append(f"printf '\\n### %s\\n' {shlex.quote(block.where)}")
        if block.lang == "python":
            parts.append(f"python - <<'DOC_PYTHON_{n}'\n{block.text}DOC_PYTHON_{n}")
        elif block.lang == "console":
            for k, command in enumerate(console_commands(block)):
                log = out / f"{n}-{k}.out"
                quoted = shlex.quote(str(log))
                parts.append(f"{{ {command.text}\n}} >{quoted} 2>&1 || {{ cat {quoted}; exit 1; }}")
                parts.append(f"cat {quoted}")
                compared.append((command, log))
        elif block.until is not None:
            terminal_log = shlex.quote(str(out / f"{n}-terminal.log"))
            body = out / f"{n}-terminal.sh"
            body.write_text(block.text)
            until = shlex.quote(block.until)
            # One second terminal, one command at a time: Ctrl-C, then the next one. Its
            # own process group, so that stopping it stops what it started.
            parts.append(
                'if [ -n "$DOC_TERMINAL" ]; then kill -- -"$DOC_TERMINAL" || true; fi\n'
                f"setsid bash {shlex.quote(str(body))} >{terminal_log} 2>&1 &\n"
                "DOC_TERMINAL=$!"
            )
            parts.append(
                f"for _ in $(seq 120); do grep -qsF {until} {terminal_log} && break; sleep 0.5; "
                "done\n"
                f"grep -qF {until} {terminal_log} || "
                f"{{ echo 'never said '{until}; cat {terminal_log}; exit 1; }}"
            )
        else:
            parts.append(block.text)
    return "\n".join(parts) + "\n", compared


@dataclass
class DocRun:
    """A finished run: its combined output, and the console outputs that differed."""

    output: str
    mismatches: list[str]


class DocShell:
    """Runs documented sequences as a reader would, in a fresh shell environment."""

    def __init__(self, workdir: Path, *, own_network: bool) -> None:
        self.workdir = workdir
        self.home = workdir / "tandem-home"
        self.own_network = own_network

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "TANDEM_HOME")}
        env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
        env["TANDEM_HOME"] = str(self.home)
        return env

    def argv(self, script: Path) -> list[str]:
        if not self.own_network:
            return ["bash", str(script)]
        # Its own network namespace (loopback only): the documented fixed ports (8000,
        # the operator's metrics port) are free whatever else runs on this machine.
        unshare = ["unshare", "--net"]
        if os.geteuid() != 0:
            unshare = ["unshare", "--user", "--map-root-user", "--net"]
        return [*unshare, "bash", "-c", 'ip link set lo up && exec bash "$0"', str(script)]

    def run(self, blocks: Iterable[Block], *, timeout_s: float) -> DocRun:
        chosen = list(blocks)
        out = self.workdir / "doc-out"
        out.mkdir(parents=True, exist_ok=True)
        text, compared = _script(chosen, out)
        script = self.workdir / "doc-script.sh"
        script.write_text(text)
        result = subprocess.run(
            self.argv(script),
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        where = ", ".join(b.where for b in chosen)
        assert result.returncode == 0, (
            f"the documented sequence ({where}) failed ({result.returncode}):\n"
            f"{result.stdout[-6000:]}"
        )
        mismatches = [
            f"{command.block.where}: `{command.text}` printed:\n{log.read_text()}\n"
            f"but the doc shows:\n{command.expected}"
            for command, log in compared
            if command.expected and not output_matches(command.expected, log.read_text())
        ]
        return DocRun(result.stdout, mismatches)

    def clean_up(self) -> None:
        """Stop what a failed sequence left running: local clusters, the dev cluster."""
        for argv in (["down", "--all"], ["dev", "cluster", "down"]):
            subprocess.run(
                [str(VENV_BIN / "tandem"), *argv],
                env=self.env(),
                capture_output=True,
                timeout=180,
                check=False,
            )


@pytest.fixture
def doc_shell(tmp_path: Path) -> Iterator[DocShell]:
    """A reader's shell in its own network namespace (see :class:`DocShell`)."""
    shell = DocShell(tmp_path, own_network=True)
    try:
        yield shell
    finally:
        shell.clean_up()


@pytest.fixture
def host_doc_shell(tmp_path: Path) -> Iterator[DocShell]:
    """A reader's shell on this machine's network: for the real node, whose kubelet,
    containerd and bridge are this machine's (one at a time: `flock
    /tmp/tandem-realnode.lock`)."""
    shell = DocShell(tmp_path, own_network=False)
    try:
        yield shell
    finally:
        shell.clean_up()


class Docs:
    """The harness, for test modules (they cannot import this conftest)."""

    repo = REPO
    run_by = RUN_BY

    @staticmethod
    def files() -> list[Path]:
        return doc_files()

    @staticmethod
    def blocks(path: Path) -> list[Block]:
        return read_blocks(path)

    @staticmethod
    def sequence(path: str, sequence: str) -> list[Block]:
        return sequence_blocks(path, sequence)

    @staticmethod
    def matches(expected: str, actual: str) -> bool:
        return output_matches(expected, actual)


@pytest.fixture(scope="session")
def docs() -> Docs:
    return Docs()
