"""``tandem crds apply``: it never stops serving a version live objects are stored in,
and refuses before it changes any CRD."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tandem.api.crd import render_crds
from tandem.cli import crds_apply
from tandem.cli.crds_apply import served_versions, stranded_versions


def crd(*versions: tuple[str, bool]) -> dict[str, Any]:
    return {"spec": {"versions": [{"name": n, "served": s} for n, s in versions]}}


def live(*stored: str) -> dict[str, Any]:
    return {"status": {"storedVersions": list(stored)}}


def test_a_first_install_strands_nothing() -> None:
    assert stranded_versions(crd(("v1alpha1", True)), None) == []


def test_the_shipped_crds_serve_what_they_store() -> None:
    for rendered in render_crds().values():
        stored = [v["name"] for v in rendered["spec"]["versions"] if v["storage"]]
        assert stranded_versions(rendered, live(*stored)) == []
        assert served_versions(rendered) == {"v1alpha1"}


def test_a_stored_version_dropped_or_no_longer_served_is_stranded() -> None:
    assert stranded_versions(crd(("v1beta1", True)), live("v1alpha1", "v1beta1")) == ["v1alpha1"]
    new = crd(("v1alpha1", False), ("v1beta1", True))
    assert stranded_versions(new, live("v1alpha1")) == ["v1alpha1"]
    assert stranded_versions(new, live("v1beta1")) == []


class FakeExtensions:
    """ApiextensionsV1Api's two calls, over CRDs whose live status is given."""

    def __init__(self, stored: dict[str, list[str]]) -> None:
        self.stored = stored
        self.patched: list[str] = []

    async def read_custom_resource_definition(self, name: str, **_: Any) -> Any:
        body = {
            "status": {
                "storedVersions": self.stored[name],
                "conditions": [{"type": "Established", "status": "True"}],
            }
        }

        class Response:
            async def read(self) -> bytes:
                return json.dumps(body).encode()

        return Response()

    async def patch_custom_resource_definition(self, name: str, body: Any, **_: Any) -> None:
        self.patched.append(name)


def run_apply(
    monkeypatch: pytest.MonkeyPatch, stored: dict[str, list[str]]
) -> tuple[int, FakeExtensions]:
    fake = FakeExtensions(stored)
    monkeypatch.setattr(crds_apply.kube_client, "ApiextensionsV1Api", lambda api: fake)
    return asyncio.run(crds_apply.apply_crds(None, render_crds(), dry_run=False)), fake


def test_a_stranded_version_refuses_before_any_crd_changes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = {"inferenceclusters.tandem.dev": ["v1alpha1"], "workerpools.tandem.dev": ["v1alpha0"]}
    code, fake = run_apply(monkeypatch, stored)
    assert code == crds_apply.EXIT_REFUSED
    assert fake.patched == []
    assert capsys.readouterr().err.splitlines() == [
        "error: refused: workerpools.tandem.dev: objects are stored as v1alpha0, which this "
        "tandem's CRD does not serve; migrate them to a served version and drop it from "
        "status.storedVersions first"
    ]


def test_served_stored_versions_apply_every_crd(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = {
        name: ["v1alpha1"] for name in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev")
    }
    code, fake = run_apply(monkeypatch, stored)
    assert code == 0
    assert sorted(fake.patched) == sorted(stored)
    assert "customresourcedefinition/workerpools.tandem.dev applied (serves v1alpha1)" in (
        capsys.readouterr().out.splitlines()
    )
