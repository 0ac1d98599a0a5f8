"""When to skip an apply, and who owns a field."""

from __future__ import annotations

from typing import Any

import pytest

from tandem_operator.kube.diff import contains, first_difference, needs_apply, owns_field


@pytest.mark.parametrize(
    ("live", "desired", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),  # extra live fields (defaults, others') are fine
        ({"a": 1}, {"a": 2}, False),
        ({"a": {"b": [1, {"c": 3, "d": 4}]}}, {"a": {"b": [1, {"c": 3}]}}, True),
        ({"a": [1, 2]}, {"a": [1]}, False),  # lists match item by item
        ({"a": True}, {"a": 1}, False),  # bool is not int
        ({"a": 1.0}, {"a": 1}, True),
        ({}, {"flag": False}, True),  # Go omits empty values
        ({}, {"n": 0, "s": "", "l": [], "m": {}}, True),
        ({}, {"n": 1}, False),
        ("x", {"a": 1}, False),
    ],
)
def test_contains(live: Any, desired: Any, expected: bool) -> None:
    assert contains(live, desired) is expected
    assert (first_difference(live, desired) is None) is expected


def test_needs_apply_when_missing_or_different() -> None:
    desired = {"metadata": {"name": "x", "annotations": {"tandem.dev/applied-hash": "1"}}}
    assert needs_apply(desired, None)
    live = {"metadata": {"name": "x", "uid": "u", "annotations": {"tandem.dev/applied-hash": "1"}}}
    assert not needs_apply(desired, live)
    live["metadata"]["annotations"]["tandem.dev/applied-hash"] = "0"  # type: ignore[index]
    assert needs_apply(desired, live)
    assert first_difference(live, desired) == ".metadata.annotations.tandem.dev/applied-hash"


def managed(manager: str, operation: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "fieldsV1": fields}


def test_owns_field_reads_managed_fields() -> None:
    obj = {
        "metadata": {
            "managedFields": [
                managed("tandem-operator", "Apply", {"f:spec": {"f:role": {}, "f:replicas": {}}}),
                managed("kubectl", "Update", {"f:spec": {"f:minReplicas": {}}}),
            ]
        }
    }
    assert owns_field(obj, "tandem-operator", ("spec", "replicas"))
    assert not owns_field(obj, "tandem-operator", ("spec", "minReplicas"))
    assert not owns_field(obj, "kubectl", ("spec", "minReplicas"))  # an Update, not an Apply
    assert not owns_field({"metadata": {}}, "tandem-operator", ("spec", "replicas"))
