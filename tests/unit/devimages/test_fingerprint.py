"""Which files an image build copies, and that changing any of them changes the hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.devimages.fingerprint import (
    context_files,
    copied_sources,
    fingerprint,
    ignored,
    logical_lines,
)

REPO = Path(__file__).resolve().parents[3]

DOCKERFILE = """\
# comment
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS build
COPY pyproject.toml \\
     README.md ./
# a comment inside is dropped
COPY --chown=1:1 src src
ADD ["notes.txt", "/opt/"]
COPY --from=build /opt/venv /opt/venv
RUN echo COPY not-a-source /x
"""


def test_continuations_join_and_comments_drop() -> None:
    lines = list(logical_lines(DOCKERFILE))
    assert lines[2].split() == ["COPY", "pyproject.toml", "README.md", "./"]
    assert not any(line.startswith("#") for line in lines)


def test_copied_sources_skip_stage_copies_and_destinations() -> None:
    assert copied_sources(DOCKERFILE) == ["pyproject.toml", "README.md", "src", "notes.txt"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("services/tandem/__pycache__/x.pyc", True),
        ("services/tandem/x.pyc", True),
        ("build/lib/tandem/x.py", True),
        ("services/tandem/build.py", False),
        ("tandem.egg-info/PKG-INFO", True),
        ("services/tandem/router/core.py", False),
    ],
)
def test_ignore_patterns(path: str, expected: bool) -> None:
    patterns = ["build", "**/__pycache__", "**/*.pyc", "**/*.egg-info"]
    assert ignored(path, patterns) is expected


def _context(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "src" / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (tmp_path / "src" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "README.md").write_text("readme\n")
    (tmp_path / "notes.txt").write_text("n\n")
    (tmp_path / "unrelated.txt").write_text("not copied\n")
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE)
    return dockerfile, tmp_path


def test_context_files_are_the_copied_ones_less_ignored(tmp_path: Path) -> None:
    _, context = _context(tmp_path)
    assert context_files(context, copied_sources(DOCKERFILE)) == [
        "README.md",
        "notes.txt",
        "pyproject.toml",
        "src/pkg/a.py",
    ]


def test_fingerprint_follows_every_input(tmp_path: Path) -> None:
    dockerfile, context = _context(tmp_path)
    first = fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"})
    assert fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"}) == first
    # Not inputs: an uncopied file, bytecode.
    (context / "unrelated.txt").write_text("changed\n")
    (context / "src" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\1")
    assert fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"}) == first
    # Inputs: build args, copied bytes, a new copied file, the exec bit, the Dockerfile.
    seen = {first, fingerprint(dockerfile, context, {"BASE_IMAGE": "b:2"})}
    (context / "src" / "pkg" / "a.py").write_text("a = 2\n")
    seen.add(fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"}))
    (context / "src" / "pkg" / "b.py").write_text("")
    seen.add(fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"}))
    (context / "src" / "pkg" / "b.py").chmod(0o755)
    seen.add(fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"}))
    dockerfile.write_text(DOCKERFILE + "USER 1\n")
    seen.add(fingerprint(dockerfile, context, {"BASE_IMAGE": "b:1"}))
    assert len(seen) == 6


def test_a_missing_copy_source_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="'gone'"):
        context_files(tmp_path, ["gone"])


def test_the_tandem_image_copies_the_packages_and_their_pins() -> None:
    text = (REPO / "images" / "tandem.Dockerfile").read_text()
    files = context_files(REPO, copied_sources(text))
    assert "pyproject.toml" in files
    assert "images/no-deps-requirements.txt" in files
    assert "services/tandem/worker/__main__.py" in files
    assert "operators/tandem_operator/render/pods.py" in files
    assert not any("__pycache__" in f or f.startswith("tests/") for f in files)
