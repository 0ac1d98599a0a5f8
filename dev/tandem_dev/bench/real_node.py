"""``python -m tandem_dev.bench --only real-node``: what the real-pods journey costs and how
fast it goes. In one run: the images rebuilt (``tandem.devimages build --force``; the
Debian base is reused once bootstrapped), the real node's kubelet compiled with an empty
build cache, then the user's journey on the real node (``tests/e2e/test_user_journey.py``,
which writes its figures to build/e2e/journey-figures.json). Needs root, the Go module
cache of tests/cluster and the repository's tests (run from a checkout, as ``make bench``
does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
FIGURES = REPO / "build" / "e2e" / "journey-figures.json"
IMAGE_INDEX = REPO / "build" / "images" / "index.json"
JOURNEY = "tests/e2e/test_user_journey.py"


def _timed(argv: list[str], *, cwd: Path = REPO, env: Mapping[str, str] | None = None) -> float:
    started = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def _kubelet_build_s() -> float:
    """The kubelet alone, as tests/cluster/build.sh builds it, with no compiled packages
    to reuse (modules are already downloaded)."""
    with tempfile.TemporaryDirectory(prefix="tandem-gocache-") as cache:
        env = {**os.environ, "GOCACHE": cache, "GOFLAGS": "-mod=readonly"}
        out = Path(cache) / "kubelet"
        return _timed(
            ["go", "build", "-o", str(out), "k8s.io/kubernetes/cmd/kubelet"],
            cwd=REPO / "tests" / "cluster",
            env=env,
        )


def _seconds(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f} s"


def render_table(
    figures: Mapping[str, Any], sizes: Mapping[str, int], timings: Mapping[str, float]
) -> str:
    """The report (pure)."""
    mib = 1 << 20
    rss = figures.get("node_daemons_rss_mib", {})
    rows = [
        ("images rebuilt (`--force`; Debian base reused)",
         f"{timings['images_s']:.0f} s"),
        *((f"image `{name}`", f"{size / mib:.1f} MiB") for name, size in sorted(sizes.items())),
        ("kubelet compile, empty build cache", f"{timings['kubelet_s']:.0f} s"),
        ("the journey, `helm install` to every container gone",
         f"{figures['journey_wall_s']:.0f} s"),
        ("pytest of the journey module (cluster and node start included)",
         f"{timings['journey_pytest_s']:.0f} s"),
        *((f"{role} pod: created → Ready", f"{figures[f'{role}_create_to_ready_s']:.1f} s")
          for role in ("frontend", "prefill", "decode") if f"{role}_create_to_ready_s" in figures),
        ("answered under `kubectl scale` 1→2→1 and a prefill pod deleted (0 failed)",
         str(figures.get("scale_and_kill_requests_answered", "-"))),
        ("answered during `helm upgrade` rolling every pod (0 failed)",
         str(figures.get("upgrade_requests_answered", "-"))),
        ("Ray group (TP2 prefill, 2 pods): created → Ready",
         _seconds(figures.get("ray_group_create_to_ready_s"))),
        *((f"Ray group's {who} SIGKILLed under load: kill → group recreated, Ready",
           _seconds(figures.get(f"ray_group_{who}_kill_to_ready_s")))
          for who in ("follower", "leader")),
        *((f"Ray group's {who} SIGKILLed: kill → the frontend takes the group out of its "
           "choices (its log)",
           _seconds(figures.get(f"ray_group_{who}_kill_to_router_stopped_s"), 2))
          for who in ("follower", "leader")),
        *((f"prefills the router still sent the group after its {who} was killed",
           str(int(figures[f"ray_group_{who}_kill_prefills_failed_over"])))
          for who in ("follower", "leader")
          if f"ray_group_{who}_kill_prefills_failed_over" in figures),
        ("answered during both group kills (0 failed)",
         str(figures.get("ray_group_kills_requests_answered", "-"))),
        *((f"node daemon {name}: resident memory", f"{value} MiB")
          for name, value in sorted(rss.items())),
        ("pods' resident memory (sum of VmRSS)",
         f"{figures['pods_rss_mib']} MiB" if "pods_rss_mib" in figures else "-"),
        ("NetworkPolicy enforced by the test network",
         "yes" if figures.get("network_policy_enforced") else "no (bridge CNI)"),
    ]  # fmt: skip
    lines = ["| what | measured |", "|---|---|"]
    lines += [f"| {what} | {value} |" for what, value in rows]
    return "\n".join(lines)


def main() -> int:
    timings = {
        "images_s": _timed([sys.executable, "-m", "tandem.devimages", "build", "--force"]),
        "kubelet_s": _kubelet_build_s(),
    }
    FIGURES.unlink(missing_ok=True)
    timings["journey_pytest_s"] = _timed(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", JOURNEY]
    )
    figures = json.loads(FIGURES.read_text())
    index = json.loads(IMAGE_INDEX.read_text())["images"]
    sizes = {name: int(entry["size"]) for name, entry in index.items()}
    print(render_table(figures, sizes, timings))
    print(
        "\nOne real node (kubelet v1.36.3 built from k8s.io/kubernetes, Debian's containerd, "
        "runc and CNI plugins) next to kwok GPU nodes on the local control plane; the chart's "
        "two operator replicas, then the reference CPU example (SmolLM2-135M-Instruct, 1 "
        "prefill + 1 decode worker, KV over NIXL between pods) from the locally built image, "
        "reached only through `kubectl port-forward`. Image sizes are the OCI archives "
        "imported into the node's containerd. Created → Ready: the pod's creation timestamp "
        "to its Ready condition (image already on the node). Memory sampled after the "
        "`helm upgrade` step, from /proc of the processes in the node's cgroups (VmRSS "
        "summed: pages shared between processes are counted in each). Then a cluster whose "
        "prefill worker is a TP2 Ray group (one rank in each of two pods) beside a TP1 "
        "decode worker; under two clients of load, its follower's container and then its "
        "leader's are SIGKILLed (`ctr tasks kill`): the LeaderWorkerSet recreates the "
        "group, and the router prefills on the decode worker meanwhile."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
