"""Locating the control-plane binaries built by tests/cluster/build.sh, and kubectl."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

COMPONENT_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KWOK_STAGES = "kwok-stages.yaml"


class BinariesMissingError(RuntimeError):
    """The Go build has not been run (or failed); the message says how to run it."""


@dataclass(frozen=True, slots=True)
class ClusterBinaries:
    bin_dir: Path
    kubectl: Path

    def path(self, component: str) -> Path:
        return self.bin_dir / component

    @property
    def kwok_stages(self) -> Path:
        return self.bin_dir / KWOK_STAGES


def find_repo_cluster_dir(start: Path | None = None) -> Path | None:
    """``tests/cluster`` of the checkout this package runs from (editable installs)."""
    here = (start or Path(__file__)).resolve()
    for parent in here.parents:
        candidate = parent / "tests" / "cluster"
        if (candidate / "build.sh").is_file():
            return candidate
    return None


def find_bin_dir(env_var: str, tests_dir: str) -> Path | None:
    """Where binaries built here live: ``$env_var``, else ``tests/<tests_dir>/bin`` of the
    checkout this package runs from; None outside a checkout."""
    override = os.environ.get(env_var)
    if override:
        return Path(override)
    cluster_dir = find_repo_cluster_dir()
    return None if cluster_dir is None else cluster_dir.parent / tests_dir / "bin"


def find_build_script() -> Path | None:
    cluster_dir = find_repo_cluster_dir()
    return None if cluster_dir is None else cluster_dir / "build.sh"


def find_kubectl() -> Path | None:
    """$TANDEM_KUBECTL, else the kubectl next to this Python (the venv), else $PATH."""
    override = os.environ.get("TANDEM_KUBECTL")
    if override:
        return Path(override)
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return beside
    found = shutil.which("kubectl")
    return Path(found) if found else None


def locate_binaries(bin_dir: Path | None = None) -> ClusterBinaries:
    """The binaries in ``bin_dir`` ($TANDEM_CLUSTER_BIN, else tests/cluster/bin)."""
    bin_dir = bin_dir or find_bin_dir("TANDEM_CLUSTER_BIN", "cluster")
    if bin_dir is None:
        raise BinariesMissingError(
            "cannot find tests/cluster/bin; set TANDEM_CLUSTER_BIN to the directory "
            "holding the binaries built by tests/cluster/build.sh"
        )
    missing = [
        name for name in (*COMPONENT_BINARIES, KWOK_STAGES) if not (bin_dir / name).is_file()
    ]
    if missing:
        raise BinariesMissingError(
            f"missing in {bin_dir}: {', '.join(missing)}; build them with "
            "`make cluster-build` (tests/cluster/build.sh, 15-25 min the first time)"
        )
    kubectl = find_kubectl()
    if kubectl is None:
        raise BinariesMissingError("kubectl not found; run `make venv` or set TANDEM_KUBECTL")
    return ClusterBinaries(bin_dir=bin_dir, kubectl=kubectl)
