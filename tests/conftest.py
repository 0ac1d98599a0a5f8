"""Every tier: Tandem's file cache (the rebuilt o200k vocabulary) lives in this session's
temporary directory, for this process and the processes its tests start; the product's
wheel and image are checked for development code the same way. The test that starts is
written to ``$TANDEM_TEST_PROGRESS`` when set: a run killed by a signal (a C library's
abort leaves only thread dumps) can still say which test it was in (``make test``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

import tandem_dev
from tandem.tokenization.o200k import CACHE_ENV

# Folder names of development code: the packages of tandem_dev, and where such code lived
# inside the product before it moved out.
DEVELOPMENT_FOLDERS = frozenset({"bench", "faults", "doubles", "tools", "docgen", "autoscale_sim"})


# ``--tier``: ``make test`` runs the suite in two pytest processes. ``parallel`` holds the
# unit tests and the tests marked ``parallel``, run by pytest-xdist beside each other:
# what they assert holds however slow the machine (answers, counts, objects; generous
# waits), and they do not use the real node. ``serial`` holds the rest (autoscaling,
# soaks, rollouts under load: real clocks), run alone on the machine. The tests on the
# simulated control plane share one worker, and so one control plane (``xdist_group``).
TIERS = ("parallel", "serial")
CONTROL_PLANE_FIXTURES = frozenset({"k8s_cluster", "e2e_cluster"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=TIERS, help="run one of make test's two tiers only")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.getoption("--tier")
    if tier is None:
        return
    unit = Path(__file__).parent / "unit"
    keep, drop = [], []
    for item in items:
        parallel = item.path.is_relative_to(unit) or item.get_closest_marker("parallel")
        if parallel and "real_node_cluster" in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} needs the real node: it cannot be parallel")
        if parallel and CONTROL_PLANE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("control-plane"))
        (keep if bool(parallel) == (tier == "parallel") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    progress = os.environ.get("TANDEM_TEST_PROGRESS")
    if progress:
        Path(progress).write_text(nodeid)


@pytest.fixture(scope="session", autouse=True)
def _private_tandem_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("tandem-cache"))
    yield
    if previous is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = previous


@pytest.fixture(scope="session")
def find_development_files() -> Callable[[Iterable[str]], list[str]]:
    """Which of some file paths (a wheel's or an image's) are development code: anything of
    ``tandem_dev``, any file in a development folder of a Tandem package, any file whose
    path ends as a module of ``tandem_dev`` does (``doubles/null_worker.py``, ...)."""
    root = Path(tandem_dev.__file__).parent
    dev_modules = {
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if path.name != "__init__.py"
    }
    assert "doubles/null_worker.py" in dev_modules  # the walk found the package

    def in_development_folder(parts: list[str]) -> bool:
        """Inside a product package (at a wheel's top, or under site-packages or the
        source tree's services/ or operators/), in a development folder."""
        for i, part in enumerate(parts[:-1]):
            if part in ("tandem", "tandem_operator") and (
                i == 0 or parts[i - 1] in ("site-packages", "services", "operators")
            ):
                return bool(DEVELOPMENT_FOLDERS & set(parts[i + 1 : -1]))
        return False

    def find(paths: Iterable[str]) -> list[str]:
        found = []
        for path in paths:
            parts = path.split("/")
            if (
                "tandem_dev" in parts
                or in_development_folder(parts)
                or any(path.endswith(f"/{module}") for module in dev_modules)
            ):
                found.append(path)
        return sorted(found)

    return find
