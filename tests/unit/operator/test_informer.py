"""The informer's store: indexing by cluster, slimming, write-through ordering."""

from __future__ import annotations

from typing import Any

from tandem_operator.kube.informer import Store


def obj(name: str, rv: str, cluster: str | None = "c", ns: str = "ns") -> dict[str, Any]:
    labels = {"tandem.dev/cluster": cluster} if cluster else {}
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": rv,
            "labels": labels,
            "managedFields": [{"manager": "x"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "k": "v"},
        }
    }


def test_objects_are_indexed_by_cluster_and_slimmed() -> None:
    store = Store(api_version="apps/v1", kind="Deployment")
    store.upsert(obj("c-a", "1"))
    store.upsert(obj("c-b", "1"))
    store.upsert(obj("d-a", "1", cluster="d"))
    store.upsert(obj("other", "1", cluster=None))
    assert [o["metadata"]["name"] for o in store.for_cluster("ns", "c")] == ["c-a", "c-b"]
    assert store.for_cluster("elsewhere", "c") == []
    stored = store.get("ns", "c-a")
    assert stored is not None
    assert (
        stored["kind"] == "Deployment" and stored["apiVersion"] == "apps/v1"
    )  # list items lack them
    assert "managedFields" not in stored["metadata"]
    assert stored["metadata"]["annotations"] == {"k": "v"}


def test_keep_managed_fields_when_asked() -> None:
    store = Store(keep_managed_fields=True)
    store.upsert(obj("x", "1"))
    assert store.get("ns", "x")["metadata"]["managedFields"] == [{"manager": "x"}]  # type: ignore[index]


def test_relabelling_moves_an_object_between_clusters() -> None:
    store = Store()
    store.upsert(obj("x", "1", cluster="c"))
    store.upsert(obj("x", "2", cluster="d"))
    assert store.for_cluster("ns", "c") == []
    assert len(store.for_cluster("ns", "d")) == 1
    store.remove("ns", "x")
    assert store.for_cluster("ns", "d") == [] and len(store) == 0


def test_write_through_never_regresses_past_a_newer_watch_event() -> None:
    store = Store()
    store.upsert(obj("x", "10"))
    assert not store.upsert_if_newer(obj("x", "9"))
    assert store.get("ns", "x")["metadata"]["resourceVersion"] == "10"  # type: ignore[index]
    assert store.upsert_if_newer(obj("x", "11"))
    assert store.get("ns", "x")["metadata"]["resourceVersion"] == "11"  # type: ignore[index]


def test_relist_reports_what_changed() -> None:
    store = Store()
    store.upsert(obj("kept", "1"))
    store.upsert(obj("changed", "1"))
    store.upsert(obj("gone", "1"))
    changes = store.replace_all([obj("kept", "1"), obj("changed", "2"), obj("new", "1")])
    summary = {
        (
            (old or {}).get("metadata", {}).get("name", "-"),
            (new or {}).get("metadata", {}).get("name", "-"),
        )
        for old, new in changes
    }
    assert summary == {("gone", "-"), ("changed", "changed"), ("-", "new")}
