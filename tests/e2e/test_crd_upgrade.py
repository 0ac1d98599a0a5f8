"""CRD upgrade and rollback on the real test control plane (docs/operator.md, "Upgrading").

The previous chart version's CRDs (``OLD``, from git: before ``spec.frontend.
coldStartTimeoutSeconds`` and ``spec.frontend.image`` existed) are created as ``helm
install`` creates ``crds/``; live InferenceClusters are created under them; then:

* upgrade: ``tandem crds apply`` (the CLI, as the docs run it) -- the objects survive,
  read back with the new fields' defaults, and a new field is stored as written;
* rollback: the old CRDs applied back by the same code path -- an object that set no new
  field reads as before; a new field on another object is pruned, as documented.

The session's control plane is left with the current CRDs (what ``helm install`` of
this chart would find).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.cli.crds_apply import FIELD_MANAGER, apply_crds
from tandem.cli.kube import api_client
from tandem.devcluster import DevCluster

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[2]
TANDEM = Path(sys.executable).parent / "tandem"
# The commit before this chart version's CRD changes (issue 35): no frontend.image, no
# frontend.coldStartTimeoutSeconds, no kvCache.offload.
OLD = "37cc071"
CRD_FILES = ("tandem.dev_inferenceclusters.yaml", "tandem.dev_workerpools.yaml")
NAMESPACE = "crd-upgrade"
CRD = "inferenceclusters.tandem.dev"


def at_old_commit(path: str) -> str:
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{OLD}:{path}"], capture_output=True, text=True
    )
    assert shown.returncode == 0, f"git cannot show {OLD}:{path} (a full clone is needed)"
    return shown.stdout


def old_crds() -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load(at_old_commit(f"charts/tandem/crds/{name}")) for name in CRD_FILES}


def old_cluster(name: str) -> str:
    doc = yaml.safe_load(at_old_commit("manifests/examples/reference-cpu.yaml"))
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    return yaml.safe_dump(doc)


def ic(cluster: DevCluster, name: str) -> dict[str, Any]:
    got = cluster.kubectl("get", "ic", name, "-n", NAMESPACE, "-o", "json").stdout
    obj: dict[str, Any] = json.loads(got)
    return obj


def frontend(cluster: DevCluster, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = ic(cluster, name)["spec"]["frontend"]
    return spec


def changed(before: Any, after: Any, path: str = "spec") -> list[str]:
    """Fields of ``before`` that ``after`` lacks or holds differently (fields ``after``
    adds, the new schema's defaults, are not changes)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [p for k, v in before.items() for p in changed(v, after.get(k), f"{path}.{k}")]
    return [] if before == after else [path]


def apply_old_crds(cluster: DevCluster) -> None:
    """The older tandem's ``tandem crds apply``: the same code with its CRDs."""

    async def run() -> int:
        api, _ = await api_client(str(cluster.kubeconfig), None)
        async with api:
            return await apply_crds(api, old_crds(), dry_run=False)

    assert asyncio.run(run()) == 0


def test_crds_upgrade_and_roll_back_under_live_objects(k8s_cluster: DevCluster) -> None:
    cluster = k8s_cluster
    for crd in old_crds().values():
        # As `helm install` does with crds/: created once, by a manager other than ours.
        # Earlier tests of the session may have installed today's CRDs already: those are
        # replaced in place (deleting them would delete every object of theirs).
        live = cluster.kubectl("get", "crd", crd["metadata"]["name"], "-o", "json", check=False)
        verb = "create"
        if live.returncode == 0:
            # A CRD is only ever updated against the version read (no unconditional PUT).
            crd["metadata"]["resourceVersion"] = json.loads(live.stdout)["metadata"][
                "resourceVersion"
            ]
            verb = "replace"
        cluster.kubectl(verb, "--field-manager=helm", "-f", "-", input=yaml.safe_dump(crd))
    for name in (CRD, "workerpools.tandem.dev"):
        cluster.wait_crd_established(name)
    cluster.kubectl("create", "namespace", NAMESPACE)
    try:
        for name in ("kept", "upgraded"):
            cluster.kubectl("create", "-f", "-", input=old_cluster(name))
        before = ic(cluster, "kept")
        assert "coldStartTimeoutSeconds" not in before["spec"]["frontend"]

        applied = subprocess.run(
            [str(TANDEM), "crds", "apply", "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.splitlines() == [
            f"customresourcedefinition/{CRD} applied (serves v1alpha1)",
            "customresourcedefinition/workerpools.tandem.dev applied (serves v1alpha1)",
        ]
        shown = cluster.kubectl("get", "crd", CRD, "--show-managed-fields", "-o", "json")
        live_crd = json.loads(shown.stdout)
        assert FIELD_MANAGER in {m["manager"] for m in live_crd["metadata"]["managedFields"]}
        assert live_crd["status"]["storedVersions"] == ["v1alpha1"]

        # Upgraded: the objects survive, defaulted by the new schema; new fields stick.
        after = ic(cluster, "kept")
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert changed(before["spec"], after["spec"]) == []
        assert frontend(cluster, "kept")["coldStartTimeoutSeconds"] == 300
        cluster.kubectl(
            "patch", "ic", "upgraded", "-n", NAMESPACE, "--type=merge",
            "-p", '{"spec": {"frontend": {"coldStartTimeoutSeconds": 120, "image": "x/y:1"}}}',
        )  # fmt: skip
        assert frontend(cluster, "upgraded")["coldStartTimeoutSeconds"] == 120
        assert frontend(cluster, "upgraded")["image"] == "x/y:1"

        # Rolled back: the object that set no new field reads as it did before the
        # upgrade; the new fields of the other are pruned (docs/operator.md).
        apply_old_crds(cluster)
        assert ic(cluster, "kept")["spec"] == before["spec"]
        rolled_back = frontend(cluster, "upgraded")
        assert "coldStartTimeoutSeconds" not in rolled_back
        assert "image" not in rolled_back
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        # Leave the session's control plane with this chart's CRDs.
        subprocess.run(
            [str(TANDEM), "crds", "apply", "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
