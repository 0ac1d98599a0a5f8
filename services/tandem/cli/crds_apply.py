"""``tandem crds apply``: this tandem's CRDs onto a cluster, before ``helm upgrade``.

Helm installs ``crds/`` once and never upgrades them, so an upgrade would leave the API
server refusing (or pruning) the fields the new operator writes. This applies the CRDs
the installed tandem renders (the same ones as ``charts/tandem/crds/``) with server-side
apply under its own field manager, forcing ownership away from Helm's first install.

It refuses, before changing anything, a CRD that no longer serves a version live objects
are still stored in (the live CRD's ``status.storedVersions``): the API server would
accept the apply, and those objects could then be neither read nor migrated. Applying an
older tandem's CRDs (a rollback) goes through the same check; fields only the newer CRD
has are pruned from objects on their next write (docs/operator.md, "Upgrading").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio.client.exceptions import ApiException

from tandem.api.crd import render_crds
from tandem.cli.kube import run_against_cluster

FIELD_MANAGER = "tandem-crds"
EXIT_REFUSED = 3
_ESTABLISH_TIMEOUT_S = 30.0

Crd = Mapping[str, Any]


def served_versions(crd: Crd) -> set[str]:
    return {v["name"] for v in crd["spec"]["versions"] if v.get("served")}


def stranded_versions(new: Crd, live: Crd | None) -> list[str]:
    """Versions live objects are stored in that ``new`` would stop serving."""
    if live is None:
        return []
    stored = live.get("status", {}).get("storedVersions", [])
    return [version for version in stored if version not in served_versions(new)]


async def apply_crds(api: Any, crds: Mapping[str, Crd], *, dry_run: bool) -> int:
    extensions = kube_client.ApiextensionsV1Api(api)
    names = [crd["metadata"]["name"] for crd in crds.values()]
    refusals: list[str] = []
    # Every CRD is checked before any is applied: a refusal leaves the cluster as it was.
    for name, crd in zip(names, crds.values(), strict=True):
        stranded = stranded_versions(crd, await _read(extensions, name))
        if stranded:
            refusals.append(
                f"{name}: objects are stored as {', '.join(stranded)}, which this tandem's "
                "CRD does not serve; migrate them to a served version and drop it from "
                "status.storedVersions first"
            )
    if refusals:
        for refusal in refusals:
            print(f"error: refused: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    for name, crd in zip(names, crds.values(), strict=True):
        await extensions.patch_custom_resource_definition(
            name,
            crd,
            field_manager=FIELD_MANAGER,
            force=True,  # take the fields over from Helm's (or kubectl's) first install
            dry_run="All" if dry_run else None,
            _content_type="application/apply-patch+yaml",
        )
        if not dry_run:
            await _wait_established(extensions, name)
        verb = "would be applied" if dry_run else "applied"
        served = ", ".join(sorted(served_versions(crd)))
        print(f"customresourcedefinition/{name} {verb} (serves {served})")
    return 0


async def _read(extensions: Any, name: str) -> Crd | None:
    try:
        response = await extensions.read_custom_resource_definition(name, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    # Raw JSON: the generated models rename status.storedVersions to stored_versions.
    live: Crd = json.loads(await response.read())
    return live


async def _wait_established(extensions: Any, name: str) -> None:
    """Until the API server serves the new schema: a ``helm upgrade`` right after must
    not race it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _ESTABLISH_TIMEOUT_S
    while True:
        live = await _read(extensions, name)
        conditions = (live or {}).get("status", {}).get("conditions", [])
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if loop.time() > deadline:
            raise TimeoutError(f"{name} not Established after {_ESTABLISH_TIMEOUT_S:g} s")
        await asyncio.sleep(0.5)


def cmd_apply(args: argparse.Namespace) -> int:
    async def apply(api: Any, _namespace: str) -> int:
        return await apply_crds(api, render_crds(), dry_run=args.dry_run)

    return run_against_cluster(
        args.kubeconfig, args.context, apply, failing_to="cannot apply the CRDs"
    )
