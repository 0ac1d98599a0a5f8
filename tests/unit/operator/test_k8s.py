"""Resource paths and the 404/409/410 error policy of the thin client."""

from __future__ import annotations

import json

import pytest

from tandem_operator.kube.client import (
    BY_KIND,
    DEPLOYMENTS,
    INFERENCE_CLUSTERS,
    PODS,
    ApiError,
    Conflict,
    Gone,
    NotFound,
    _error,
)


@pytest.mark.parametrize(
    ("resource", "args", "path"),
    [
        (PODS, (None,), "/api/v1/pods"),
        (PODS, ("ns",), "/api/v1/namespaces/ns/pods"),
        (DEPLOYMENTS, ("ns", "d"), "/apis/apps/v1/namespaces/ns/deployments/d"),
        (
            INFERENCE_CLUSTERS,
            ("ns", "c", "status"),
            "/apis/tandem.dev/v1alpha1/namespaces/ns/inferenceclusters/c/status",
        ),
    ],
)
def test_paths(resource: object, args: tuple[str | None, ...], path: str) -> None:
    assert resource.path(*args) == path  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("status", "kind"), [(404, NotFound), (409, Conflict), (410, Gone), (422, ApiError)]
)
def test_errors_map_to_exception_kinds(status: int, kind: type[ApiError]) -> None:
    body = json.dumps({"kind": "Status", "reason": "R", "message": "went wrong"}).encode()
    error = _error(status, body)
    assert type(error) is kind
    assert (error.status, error.reason, error.message) == (status, "R", "went wrong")


def test_a_404_says_what_it_is_about() -> None:
    # What kube-apiserver answers an apply into a namespace being deleted (Status details).
    body = json.dumps({
        "kind": "Status", "reason": "NotFound", "message": 'namespaces "ns" not found',
        "details": {"name": "ns", "kind": "namespaces"},
    }).encode()  # fmt: skip
    assert _error(404, body).kind == "namespaces"
    # A kind the server does not serve: no details.
    assert _error(404, b'{"kind": "Status", "reason": "NotFound"}').kind == ""


def test_a_non_json_error_body_is_kept_as_the_message() -> None:
    error = _error(502, b"<html>bad gateway</html>")
    assert error.message == "<html>bad gateway</html>"


def test_every_rendered_kind_has_a_resource() -> None:
    for kind in (
        "WorkerPool",
        "Deployment",
        "LeaderWorkerSet",
        "Service",
        "ConfigMap",
        "PodDisruptionBudget",
    ):
        assert BY_KIND[kind].kind == kind
