"""images/tandem-trtllm.Dockerfile installs what the gpt-oss (harmony) path needs.

The image cannot be built here (its base is NVIDIA's release image, from a registry these
machines do not reach), so the Dockerfile is read instead: the no-deps wheels the harmony
path names in its own install hints must be installed, pinned by the same requirement
files the CPU image and ``make venv`` install.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tandem.devimages.fingerprint import copied_sources, logical_lines
from tandem.tokenization import o200k

REPO = Path(__file__).resolve().parents[3]
IMAGES = REPO / "images"
TRTLLM = IMAGES / "tandem-trtllm.Dockerfile"
CPU = IMAGES / "tandem.Dockerfile"


def run_commands(dockerfile: Path) -> list[list[str]]:
    """Each ``RUN`` line's shell commands (split on ``&&``), as words."""
    commands: list[list[str]] = []
    for line in logical_lines(dockerfile.read_text()):
        instruction, _, rest = line.partition(" ")
        if instruction.upper() != "RUN":
            continue
        words = [w for w in shlex.split(rest) if not w.startswith("--mount=")]
        command: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", ";"):
                if command:
                    commands.append(command)
                command = []
            else:
                command.append(word)
    return commands


def no_deps_files(dockerfile: Path) -> list[str]:
    """The files ``pip install --no-deps -r FILE`` reads in ``dockerfile``."""
    files: list[str] = []
    for command in run_commands(dockerfile):
        if command[:2] != ["pip", "install"] or "--no-deps" not in command:
            continue
        files += [command[i + 1] for i, word in enumerate(command) if word == "-r"]
    return files


def requirement_lines(path: Path) -> set[str]:
    """The requirements of a pip requirements file, ``-r`` includes followed."""
    lines: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            lines |= requirement_lines(path.parent / line.removeprefix("-r ").strip())
        else:
            lines.add(line)
    return lines


def installed_no_deps(dockerfile: Path) -> set[str]:
    copied = {Path(source).name: REPO / source for source in copied_sources(dockerfile.read_text())}
    pins: set[str] = set()
    for name in no_deps_files(dockerfile):
        assert name in copied, f"{dockerfile.name} installs {name} without copying it in"
        pins |= requirement_lines(copied[name])
    return pins


def harmony_wheels() -> set[str]:
    """The pins the harmony path tells users to install ``--no-deps`` (its error hints)."""
    prefix = "pip install --no-deps "
    assert o200k.QUICKTOK_INSTALL.startswith(prefix)
    return set(o200k.QUICKTOK_INSTALL.removeprefix(prefix).split())


def test_trtllm_image_installs_the_harmony_no_deps_wheels() -> None:
    required = harmony_wheels()
    assert required, "the harmony path names no wheel"
    missing = required - installed_no_deps(TRTLLM)
    assert not missing, f"{TRTLLM.name} does not install {sorted(missing)} --no-deps"


def test_both_images_pin_the_no_deps_wheels_alike() -> None:
    gpu, cpu = installed_no_deps(TRTLLM), installed_no_deps(CPU)
    assert harmony_wheels() <= cpu
    assert gpu <= cpu, f"pins only the GPU image has: {sorted(gpu - cpu)}"


def test_trtllm_image_installs_the_projects_gpu_requirements() -> None:
    commands = run_commands(TRTLLM)
    assert ["python3", "requirements.py", "pyproject.toml", "gpu", ">", "requirements.txt"] in (
        commands
    )
    assert ["pip", "install", "-r", "requirements.txt"] in commands
