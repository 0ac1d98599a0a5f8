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


def test_a_relist_of_one_namespace_leaves_the_others_in_a_shared_store() -> None:
    """Namespace-scoped installs: one informer per namespace fills one store."""
    store = Store()
    store.upsert(obj("x", "1", ns="a"))
    store.upsert(obj("y", "1", ns="b"))
    changes = store.replace_all([obj("z", "1", ns="a")], namespace="a")
    assert store.get("b", "y") is not None and store.get("a", "x") is None
    assert {
        ((o or {}).get("metadata", {}).get("name"), (n or {}).get("metadata", {}).get("name"))
        for o, n in changes
    } == {("x", None), (None, "z")}


def test_the_operator_runs_one_informer_per_watched_namespace_sharing_each_store() -> None:
    from tandem_operator.kube import client as k8s
    from tandem_operator.manager import Controller, OperatorOptions

    controller = Controller(object(), OperatorOptions(namespaces=("a", "b")))  # type: ignore[arg-type]
    by_kind: dict[str, set[str | None]] = {}
    stores: dict[str, set[int]] = {}
    for inf in controller.informers:
        by_kind.setdefault(inf.resource.kind, set()).add(inf._namespace)
        stores.setdefault(inf.resource.kind, set()).add(id(inf.store))
    assert by_kind[k8s.SECRETS.kind] == {"a", "b"}
    assert by_kind[k8s.INFERENCE_CLUSTERS.kind] == {"a", "b"}
    assert by_kind[k8s.NODES.kind] == {None}  # cluster-scoped: read everywhere
    assert all(len(ids) == 1 for ids in stores.values())
