"""images/tandem-trtllm.Dockerfile installs what the gpt-oss (harmony) path needs.

The image cannot be built here (its base is NVIDIA's release image, from a registry these
machines do not reach), so the Dockerfile is read instead: the no-deps wheels the harmony
path names in its own install hints must be installed, pinned by the same requirement
files the CPU image and ``make venv`` install; every third-party module a trtllm worker
can import (read from the code, ``imports.py``) must come from a distribution those
installs bring, or from the base image; and the base image's TensorRT-LLM version is the
one the adapter and the fake (tests/fakes/tensorrt_llm) are written against.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tandem.devimages.fingerprint import copied_sources, logical_lines
from tandem.engines.registry import ENGINE_MODULES
from tandem.engines.trtllm.api import load_trtllm
from tandem.engines.trtllm.version import PINNED_VERSION, RELEASE_IMAGE
from tandem.tokenization import o200k

from .imports import third_party_imports

REPO = Path(__file__).resolve().parents[3]
IMAGES = REPO / "images"
TRTLLM = IMAGES / "tandem-trtllm.Dockerfile"
CPU = IMAGES / "tandem.Dockerfile"
FAKE_VERSION = REPO / "tests" / "fakes" / "tensorrt_llm" / "version.py"


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


# What NVIDIA's release image brings and the Dockerfile must not replace: TensorRT-LLM
# itself, and the NIXL build its cache transceiver is linked against.
BASE_IMAGE_MODULES = {"tensorrt_llm", "nixl"}


def pip_requirements(dockerfile: Path) -> set[str]:
    """Every requirement the ``pip install -r FILE`` commands of ``dockerfile`` read:
    files copied in from the repository, and those ``requirements.py`` writes, produced
    by running it on the same arguments."""
    copied = {Path(source).name: REPO / source for source in copied_sources(dockerfile.read_text())}
    written: dict[str, set[str]] = {}
    lines: set[str] = set()
    for command in run_commands(dockerfile):
        if command[:2] == ["python3", "requirements.py"] and command[-2] == ">":
            arguments = [str(copied.get(word, word)) for word in command[2:-2]]
            script = [sys.executable, str(copied["requirements.py"]), *arguments]
            output = subprocess.run(script, capture_output=True, text=True, check=True).stdout
            written[command[-1]] = {line for line in output.splitlines() if line}
        elif command[:2] == ["pip", "install"]:
            for file in (command[i + 1] for i, word in enumerate(command) if word == "-r"):
                assert file in copied or file in written, f"{dockerfile.name}: no {file}"
                lines |= requirement_lines(copied[file]) if file in copied else written[file]
    return lines


def with_dependencies(requirements: Iterable[str]) -> set[str]:
    """The distributions ``requirements`` install, their own requirements followed
    (as installed here: the project's ranges, resolved in this venv)."""
    names: set[str] = set()
    todo = [Requirement(line) for line in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in names:
            continue
        names.add(name)
        try:
            needs = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not in this venv: its own requirements cannot be read here
        for line in needs:
            need = Requirement(line)
            extras = requirement.extras or {""}
            if need.marker is None or any(need.marker.evaluate({"extra": e}) for e in extras):
                todo.append(need)
    return names


def trtllm_worker_imports() -> dict[str, set[str]]:
    """What a ``tandem.worker`` process running the trtllm engine can import."""
    others = [module for kind, module in ENGINE_MODULES.items() if kind != "trtllm"]
    found = third_party_imports(["tandem.worker.main", ENGINE_MODULES["trtllm"]], skip=others)
    # load_trtllm imports its module by a name it is given; its default is the real one.
    trtllm = inspect.signature(load_trtllm).parameters["module_name"].default
    found.setdefault(trtllm, set()).add("tandem.engines.trtllm.api")
    return found


def test_the_trtllm_image_installs_every_module_the_trtllm_worker_imports() -> None:
    imported = trtllm_worker_imports()
    assert set(imported) >= BASE_IMAGE_MODULES, "a base-image module is no longer imported"
    installed = with_dependencies(pip_requirements(TRTLLM))
    distributions = importlib.metadata.packages_distributions()
    missing = {
        module: sorted(importers)
        for module, importers in imported.items()
        if module not in BASE_IMAGE_MODULES
        and not {canonicalize_name(d) for d in distributions.get(module, [])} & installed
    }
    assert not missing, f"{TRTLLM.name} installs no distribution for {missing}"


def test_the_trtllm_image_keeps_the_base_images_builds() -> None:
    distributions = importlib.metadata.packages_distributions()
    base = {canonicalize_name(d) for m in BASE_IMAGE_MODULES for d in distributions.get(m, [])}
    pinned = {canonicalize_name(Requirement(line).name) for line in pip_requirements(TRTLLM)}
    assert not base & pinned, f"{TRTLLM.name} would reinstall {sorted(base & pinned)}"


def test_trtllm_image_installs_the_projects_gpu_and_multinode_requirements() -> None:
    commands = run_commands(TRTLLM)
    requirements = ["python3", "requirements.py", "pyproject.toml", "gpu", "multinode"]
    assert [*requirements, ">", "requirements.txt"] in commands
    assert ["pip", "install", "-r", "requirements.txt"] in commands


def base_image(dockerfile: Path) -> str:
    """The ``BASE_IMAGE`` build argument's default, which ``FROM ${BASE_IMAGE}`` uses."""
    lines = list(logical_lines(dockerfile.read_text()))
    assert "FROM ${BASE_IMAGE}" in lines, f"{dockerfile.name} is not built FROM ${{BASE_IMAGE}}"
    defaults = [
        line.removeprefix("ARG BASE_IMAGE=") for line in lines if line.startswith("ARG BASE_IMAGE=")
    ]
    assert len(defaults) == 1, f"{dockerfile.name} has {len(defaults)} BASE_IMAGE defaults"
    return defaults[0]


def fake_version() -> str:
    """``__version__`` of the fake, read without importing it (it shadows the real
    package's name)."""
    for node in ast.parse(FAKE_VERSION.read_text()).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__version__":
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    raise AssertionError(f"{FAKE_VERSION} sets no __version__")


def test_the_image_pin_the_adapter_and_the_fake_name_one_version() -> None:
    image = base_image(TRTLLM)
    repository, _, tag = image.rpartition(":")
    assert repository == "nvcr.io/nvidia/tensorrt-llm/release", image
    assert (tag, image) == (PINNED_VERSION, RELEASE_IMAGE)
    assert fake_version() == tag, f"the fake follows {fake_version()}, the image pins {tag}"
