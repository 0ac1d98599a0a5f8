"""The product's wheel, built as `pip wheel` builds it from a checkout, carries the product
only: ``tandem`` and ``tandem_operator`` with their data files, and none of the
development code (benchmarks, fault beds, soak, fuzz, test doubles, doc generators) that
lives in ``dev/`` as the ``tandem-dev`` distribution."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    # Built from a copy of what the wheel is made from, so the checkout gets no build/ or
    # egg-info of it; --no-build-isolation: setuptools and wheel are in this venv already.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for tree in ("services", "operators", "dev"):
        shutil.copytree(CHECKOUT / tree, source / tree, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("tandem-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_exactly_the_two_product_packages(wheel_files: list[str]) -> None:
    tops = {name.split("/", 1)[0] for name in wheel_files}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    assert len(dist_info) == 1
    assert tops - dist_info == {"tandem", "tandem_operator"}


def test_the_wheel_holds_what_the_product_runs(wheel_files: list[str]) -> None:
    files = set(wheel_files)
    for needed in (
        "tandem/cli/main.py",
        "tandem/frontend/__main__.py",
        "tandem/worker/__main__.py",
        "tandem/proto/worker.proto",
        "tandem/proto/worker_pb2.py",
        "tandem_operator/manager.py",
        "tandem/py.typed",
    ):
        assert needed in files


def test_no_development_module_is_in_the_wheel(
    wheel_files: list[str], find_development_files: Callable[[Iterable[str]], list[str]]
) -> None:
    assert find_development_files(wheel_files) == []
