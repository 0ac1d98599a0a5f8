"""The real node's cluster DNS (tandem.devcluster.dns): CoreDNS's rights are exactly the
reads its kubernetes plugin makes, its identity is a token user of its own, and a missing
build is one actionable line. (That pods resolve names through it is the real node's:
tests/e2e/test_leaderworkerset_e2e.py.)"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tandem.devcluster import dns


def test_coredns_may_only_list_and_watch_services_slices_and_namespaces() -> None:
    role, binding = dns.render_rbac()
    for obj in (role, binding):
        kubernetes_validate.validate(obj, "1.36", strict=True)
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        (group, resource, verb)
        for group, resource in (
            ("", "services"),
            ("", "namespaces"),
            ("discovery.k8s.io", "endpointslices"),
        )
        for verb in ("list", "watch")
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": dns.USER}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_a_missing_build_says_how_to_make_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(dns.BIN_ENV, raising=False)
    with pytest.raises(dns.CoreDnsBuildMissingError, match="run `make dns-build`"):
        dns.locate_coredns(tmp_path)
    binary = tmp_path / "coredns"
    binary.write_bytes(b"")
    assert dns.locate_coredns(tmp_path) == binary
    monkeypatch.setenv(dns.BIN_ENV, str(tmp_path))
    assert dns.locate_coredns() == binary
