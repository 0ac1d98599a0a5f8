"""The GPU examples on the simulated cluster: placement, NVLink domains, DRA, capacity.

Same setup as the operator e2e (the chart installed, the operator out of cluster with
the chart's ServiceAccount token, so RBAC is checked), under its own release. The test
cluster has no NVIDIA DRA driver, so this module plays it, as faithfully as the API
allows and no further:

* the ComputeDomain CRD: ``nvidia_dra/computedomain-crd.yaml``, our copy of the real
  group/version/kind and of the fields Tandem uses (source cited in the file);
* the driver's DeviceClass ``compute-domain-default-channel.nvidia.com`` (its CEL
  selector as the driver's chart installs it) and one ResourceSlice per GB200 tray
  publishing the tray's IMEX ``channel-0`` — so the scheduler allocates a channel per
  tray and a second claim on one tray fails, as with the real driver;
* the driver controller's one job Tandem relies on: when a ComputeDomain appears, create
  the ResourceClaimTemplate it names (requesting one channel device).

The chart is installed with ``charts/tandem/values-gpu.yaml`` and an image per profile,
and the operator runs with exactly the flags the chart's Deployment renders from those
values (``chart_operator_args``): every hardware fact the operator uses comes through the
chart's values, none from a flag of the test's own.

Examples are applied with ``autoscaling.enabled: false``: the builtin autoscaler would
poll the frontend pods' addresses, which in a kwok cluster are not 127.0.0.1. The batch
sizes the capacity check uses do not change (they come from the autoscaling targets).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tandem.devcluster import DevCluster
from tandem.devcluster.probes import ProbeTimeoutError, wait_until
from tandem_dev.harness import (
    OperatorProcess,
    chart_operator_args,
    render_model_claim,
    write_token_kubeconfig,
)

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tandem"
EXAMPLES = REPO / "manifests" / "examples"
COMPUTE_DOMAIN_CRD = Path(__file__).parent / "nvidia_dra" / "computedomain-crd.yaml"
GPU_VALUES = CHART / "values-gpu.yaml"
# Over values-gpu.yaml: the GB200 trays get their own build, and the registry needs
# credentials (kwok pulls nothing: the pods' spec is what is checked).
GB200_IMAGE = "registry.example/tandem-trtllm:0.1.0-arm64"
PULL_SECRETS = [{"name": "gpu-registry"}]
SITE_VALUES = {
    "dataPlane": {"trtllmImageByProfile": {"gb200": GB200_IMAGE}, "imagePullSecrets": PULL_SECRETS}
}
TRTLLM_IMAGE = "ghcr.io/tandem-dev/tandem-trtllm:0.1.0"
HELM = Path(sys.executable).parent / "helm"
RELEASE = "gpu-e2e"
SYSTEM_NS = "gpu-e2e-system"
SERVICE_ACCOUNT = f"{RELEASE}-tandem"
WAIT_S = 90.0
CLIQUE = "nvidia.com/gpu.clique"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
Json = dict[str, Any]


@dataclass
class Env:
    """The cluster, and the operator the chart's values configure."""

    cluster: Any
    kubeconfig: Path  # the chart's ServiceAccount
    logs: Path
    operator: OperatorProcess | None = None

    def start_operator(self) -> None:
        """(Re)start the operator with the flags the chart's Deployment has now, as a
        rollout of the chart's operator pods would after ``helm upgrade``."""
        self.stop_operator()
        deployment = self.cluster.get_json("deploy", f"{SERVICE_ACCOUNT}-operator", "-n", SYSTEM_NS)
        operator = OperatorProcess(
            self.kubeconfig,
            log_path=self.logs / "operator.log",
            lease_namespace=SYSTEM_NS,
            identity="gpu",
            extra_args=chart_operator_args(deployment),
        ).start()
        self.operator = operator
        operator.wait_ready()
        eventually(lambda: operator.metric("tandem_operator_leader") == 1, "the operator to lead")

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop()
            self.operator = None

    def upgrade(self, *sets: str) -> None:
        """``helm upgrade`` the release with more values, then restart the operator."""
        argv = ["upgrade", RELEASE, str(CHART), "-n", SYSTEM_NS, "--reuse-values"]
        for value in sets:
            argv += ["--set", value]
        self.cluster.helm(*argv)
        self.start_operator()


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


def apply_json(cluster: Any, *objects: Json) -> None:
    if not objects:
        return
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def install_dra_stand_in(cluster: Any) -> None:
    """The DRA driver's CRD, DeviceClass and per-tray channel devices (module docstring)."""
    cluster.kubectl("apply", "-f", str(COMPUTE_DOMAIN_CRD))
    cluster.dev.wait_crd_established("computedomains.resource.nvidia.com", timeout_s=60)
    apply_json(cluster, *dra_stand_in_objects(cluster))


def uninstall_dra_stand_in(cluster: Any) -> None:
    """A cluster without NVIDIA's DRA driver: no ComputeDomain API, no channel devices."""
    for obj in dra_stand_in_objects(cluster):
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")
    cluster.kubectl("delete", "-f", str(COMPUTE_DOMAIN_CRD), "--ignore-not-found", "--wait=true")


def dra_stand_in_objects(cluster: Any) -> list[Json]:
    selector = (
        f"device.driver == '{CD_DRIVER}' && device.attributes['{CD_DRIVER}'].type == 'channel'"
        f" && device.attributes['{CD_DRIVER}'].id == 0"
    )
    objects: list[Json] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CHANNEL_CLASS},
            "spec": {"selectors": [{"cel": {"expression": selector}}]},
        }
    ]
    for node in cluster.items("nodes", "-l", CLIQUE):
        name = node["metadata"]["name"]
        channel = {"type": {"string": "channel"}, "id": {"int": 0}}
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{CD_DRIVER}"},
                "spec": {
                    "driver": CD_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "channel-0", "attributes": channel}],
                },
            }
        )
    return objects


def play_compute_domain_controller(cluster: Any, namespace: str) -> Json:
    """Wait for the cluster's ComputeDomain and create the ResourceClaimTemplate it names."""
    eventually(lambda: bool(cluster.items("computedomains", "-n", namespace)), "a ComputeDomain")
    (domain,) = cluster.items("computedomains", "-n", namespace)
    name = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    request = {"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}
    apply_json(
        cluster,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        },
    )
    return domain


def apply_example(cluster: Any, example: str, namespace: str, **spec: Any) -> str:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["autoscaling"] = {**doc["spec"].get("autoscaling", {}), "enabled": False}
    for key, value in spec.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    apply_json(cluster, *render_model_claim(namespace, doc))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    name: str = doc["metadata"]["name"]
    return name


def wait_ready(cluster: Any, namespace: str, name: str) -> None:
    try:
        eventually(lambda: cluster.is_ready(namespace, name), f"{namespace}/{name} Ready")
    except ProbeTimeoutError as exc:
        raise ProbeTimeoutError(f"{exc}: {where_it_stands(cluster, namespace, name)}") from None


def where_it_stands(cluster: Any, namespace: str, name: str) -> str:
    """What a timed-out wait saw last: the conditions, each pod's phase and node (or why it
    is unscheduled), and the GPU nodes that are not Ready or carry taints."""
    status = cluster.ic(namespace, name).get("status") or {}
    conditions = [
        f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
        for c in status.get("conditions") or ()
    ]
    pods = []
    for pod in cluster.items("pods", "-n", namespace):
        unscheduled = [
            c.get("message", "") for c in pod["status"].get("conditions") or ()
            if c["type"] == "PodScheduled" and c["status"] != "True"
        ]  # fmt: skip
        where = pod["spec"].get("nodeName") or f"unscheduled ({'; '.join(unscheduled)})"
        pods.append(f"{pod['metadata']['name']} {pod['status'].get('phase')} on {where}")
    nodes = []
    for node in cluster.items("nodes", "-l", "nvidia.com/gpu.product"):
        ready = cluster.condition(node, "Ready").get("status")
        taints = [t["key"] for t in node["spec"].get("taints") or ()]
        if ready != "True" or taints:
            nodes.append(f"{node['metadata']['name']} Ready={ready} taints={taints}")
    return f"conditions {conditions}; pods {pods}; GPU nodes not clear {nodes}"


def worker_pods(cluster: Any, namespace: str, name: str) -> list[Json]:
    selector = f"tandem.dev/cluster={name},tandem.dev/role in (prefill,decode)"
    return [
        p
        for p in cluster.items("pods", "-n", namespace, "-l", selector)
        if not p["metadata"].get("deletionTimestamp")
    ]


def node_labels(cluster: Any, pod: Json) -> dict[str, str]:
    labels: dict[str, str] = cluster.get_json("node", pod["spec"]["nodeName"])["metadata"]["labels"]
    return labels


@pytest.fixture(scope="module")
def env(
    k8s_cluster: DevCluster, e2e_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    logs = tmp_path_factory.mktemp("gpu-operator")
    helm = [str(HELM), f"--kubeconfig={k8s_cluster.kubeconfig}"]
    site_values = logs / "site-values.yaml"
    site_values.write_text(yaml.safe_dump(SITE_VALUES))
    e2e_cluster.helm(
        "install", RELEASE, str(CHART), "-n", SYSTEM_NS, "--create-namespace",
        "-f", str(GPU_VALUES), "-f", str(site_values),
    )  # fmt: skip
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        k8s_cluster.wait_crd_established(crd, timeout_s=60)
    install_dra_stand_in(e2e_cluster)
    token = k8s_cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NS, "--duration=1h"
    ).stdout.strip()
    kubeconfig = write_token_kubeconfig(k8s_cluster.kubeconfig, token, logs / "sa.kubeconfig")
    env = Env(e2e_cluster, kubeconfig, logs)
    try:
        env.start_operator()
        yield env
    finally:
        env.stop_operator()
        subprocess.run(
            [*helm, "uninstall", RELEASE, "-n", SYSTEM_NS], capture_output=True, timeout=180
        )
        print(f"operator log: {logs / 'operator.log'}")


@pytest.fixture
def namespace(env: Env, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.removeprefix("test_").replace("_", "-")[:30].strip("-[]")
    name = f"{base}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")
    env.cluster.kubectl("create", "namespace", name)
    yield name
    # Wait: the next test may need the GPUs this one's pods hold.
    env.cluster.kubectl("delete", "namespace", name, "--wait=true", timeout_s=180)


def assert_frontend_from_values(cluster: Any, namespace: str, name: str) -> None:
    """The frontend pods have values-gpu.yaml's resources and the pull secrets."""
    values = yaml.safe_load(GPU_VALUES.read_text())["dataPlane"]
    selector = f"tandem.dev/cluster={name},tandem.dev/role=frontend"
    pods = cluster.items("pods", "-n", namespace, "-l", selector)
    assert pods
    for pod in pods:
        assert pod["spec"]["imagePullSecrets"] == PULL_SECRETS
        assert pod["spec"]["containers"][0]["resources"] == values["frontendResources"]


def assert_applied_objects_validate(cluster: Any, namespace: str, name: str) -> None:
    """What the API server holds passes Kubernetes 1.36's strict schemas."""
    checked = 0
    for kind in ("deployments", "services", "configmaps", "poddisruptionbudgets"):
        for obj in cluster.items(kind, "-n", namespace, "-l", f"tandem.dev/cluster={name}"):
            obj = {**obj, "apiVersion": obj.get("apiVersion", "v1")}
            kubernetes_validate.validate(obj, "1.36", strict=True)
            checked += 1
    assert checked >= 9  # 3 Deployments, 3 Services, 1 ConfigMap, 2 PDBs


# --------------------------------------------------------------------------- placement


@pytest.mark.parametrize(
    ("example", "product", "arch", "gpus_per_node"),
    [
        ("gpt-oss-120b-b200.yaml", "NVIDIA-B200", "amd64", "8"),
        ("gpt-oss-20b-h100.yaml", "NVIDIA-H100-80GB-HBM3", "amd64", "8"),
    ],
)
def test_example_lands_on_its_gpus_and_becomes_ready(
    env: Env, namespace: str, example: str, product: str, arch: str, gpus_per_node: str
) -> None:
    cluster = env.cluster
    name = apply_example(cluster, example, namespace)
    wait_ready(cluster, namespace, name)
    pods = worker_pods(cluster, namespace, name)
    spec = cluster.ic(namespace, name)["spec"]
    assert len(pods) == spec["prefill"]["replicas"] + spec["decode"]["replicas"]
    for pod in pods:
        labels = node_labels(cluster, pod)
        assert labels["nvidia.com/gpu.product"] == product
        assert (labels["kubernetes.io/arch"], labels["nvidia.com/gpu.count"]) == (
            arch,
            gpus_per_node,
        )
        container = pod["spec"]["containers"][0]
        role = pod["metadata"]["labels"]["tandem.dev/role"]
        gpus = str(spec[role].get("gpusPerWorker", spec[role].get("tensorParallelSize", 1)))
        assert container["resources"]["limits"] == {"nvidia.com/gpu": gpus, "rdma/ib": gpus}
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert container["image"] == TRTLLM_IMAGE  # no image of their own: the default
        assert pod["spec"]["imagePullSecrets"] == PULL_SECRETS
    assert_frontend_from_values(cluster, namespace, name)
    status = cluster.ic(namespace, name)
    assert cluster.condition(status, "NVLinkLocal") == {}  # only NVLink-domain profiles report it
    assert_applied_objects_validate(cluster, namespace, name)


def test_gb200_cluster_stays_in_one_nvlink_domain_and_reports_a_split(
    env: Env, namespace: str
) -> None:
    cluster = env.cluster
    name = apply_example(cluster, "gpt-oss-120b-gb200.yaml", namespace)
    domain = play_compute_domain_controller(cluster, namespace)
    assert domain["metadata"]["ownerReferences"][0]["kind"] == "InferenceCluster"
    wait_ready(cluster, namespace, name)

    pods = worker_pods(cluster, namespace, name)
    assert len(pods) == 6  # prefill 4 x 1 GPU, decode 2 x 4 GPUs (one tray each)
    cliques = {node_labels(cluster, p)[CLIQUE] for p in pods}
    assert len(cliques) == 1, cliques
    for pod in pods:
        assert node_labels(cluster, pod)["kubernetes.io/arch"] == "arm64"
        assert pod["spec"]["containers"][0]["image"] == GB200_IMAGE  # its profile's image
    # Whole-tray decode workers hold an allocated IMEX channel of their own tray.
    for pod in (p for p in pods if p["metadata"]["labels"]["tandem.dev/role"] == "decode"):
        (claim_status,) = pod["status"]["resourceClaimStatuses"]
        claim = cluster.get_json(
            "resourceclaim", claim_status["resourceClaimName"], "-n", namespace
        )
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == (pod["spec"]["nodeName"], "channel-0")
    local = cluster.condition(cluster.ic(namespace, name), "NVLinkLocal")
    assert (local["status"], local["reason"]) == ("True", "SameNVLinkDomain")
    assert_applied_objects_validate(cluster, namespace, name)

    # 2 more decode trays: 20 GPUs do not fit one simulated domain (4 trays x 4 GPUs).
    cluster.patch_ic(namespace, name, {"decode": {"replicas": 4}})

    def split() -> bool:
        obj = cluster.ic(namespace, name)
        return cluster.condition(obj, "NVLinkLocal").get("reason") == "SplitAcrossNVLinkDomains"

    eventually(split, "NVLinkLocal=False (SplitAcrossNVLinkDomains)")
    wait_ready(cluster, namespace, name)  # visible, never Ready-blocking
    obj = cluster.ic(namespace, name)
    assert cluster.condition(obj, "Degraded")["status"] == "False"
    assert "over RDMA" in cluster.condition(obj, "NVLinkLocal")["message"]
    assert (
        len({node_labels(cluster, p)[CLIQUE] for p in worker_pods(cluster, namespace, name)}) == 2
    )

    # Without whole-tray workers nobody claims the channel: the ComputeDomain is pruned.
    cluster.patch_ic(
        namespace,
        name,
        {"decode": {"replicas": 2, "tensorParallelSize": 1, "gpusPerWorker": 1}},
    )
    eventually(
        lambda: not cluster.items("computedomains", "-n", namespace), "the ComputeDomain pruned"
    )
    wait_ready(cluster, namespace, name)


def test_gb200_without_the_dra_driver_deploys_through_values(env: Env, namespace: str) -> None:
    """Nodes without NVIDIA's DRA driver: the example waits in ComputeDomainMissing, and
    one value (``fabric.computeDomains: false``, rolled out by ``helm upgrade``) brings it
    to Ready without multi-node NVLink. Then the driver and the value come back."""
    cluster = env.cluster
    uninstall_dra_stand_in(cluster)
    try:
        env.start_operator()  # it learns which kinds the API serves when it starts
        name = apply_example(cluster, "gpt-oss-120b-gb200.yaml", namespace)

        def missing() -> bool:
            degraded = cluster.condition(cluster.ic(namespace, name), "Degraded")
            return degraded.get("reason") == "ComputeDomainMissing"

        eventually(missing, "Degraded=ComputeDomainMissing")
        degraded = cluster.condition(cluster.ic(namespace, name), "Degraded")
        assert "fabric.computeDomains: false" in degraded["message"], degraded["message"]

        env.upgrade("fabric.computeDomains=false")
        deployment = cluster.get_json("deploy", f"{SERVICE_ACCOUNT}-operator", "-n", SYSTEM_NS)
        assert "--no-compute-domains" in chart_operator_args(deployment)
        wait_ready(cluster, namespace, name)
        pods = worker_pods(cluster, namespace, name)
        assert len(pods) == 6
        for pod in pods:
            assert "resourceClaims" not in pod["spec"]
            env_names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
            assert "NCCL_MNNVL_ENABLE" not in env_names
            assert node_labels(cluster, pod)["kubernetes.io/arch"] == "arm64"
        local = cluster.condition(cluster.ic(namespace, name), "NVLinkLocal")
        assert local["status"] == "True"  # placement still keeps one NVL72 domain
    finally:
        install_dra_stand_in(cluster)
        env.upgrade("fabric.computeDomains=true")


# --------------------------------------------------------------------------- upgrades

FRONTEND_IMAGE = "ghcr.io/tandem-dev/tandem:0.1.0"


def pod_images(cluster: Any, namespace: str, name: str) -> dict[str, tuple[str, int]]:
    """Each of the cluster's Deployments: (its pods' image, its generation)."""
    out: dict[str, tuple[str, int]] = {}
    for pool in ("frontend", "prefill", "decode"):
        deploy = cluster.get_json("deploy", f"{name}-{pool}", "-n", namespace)
        image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        out[pool] = (image, deploy["metadata"]["generation"])
    return out


def images_only(found: dict[str, tuple[str, int]]) -> dict[str, str]:
    return {pool: image for pool, (image, _) in found.items()}


def test_new_default_images_roll_only_the_clusters_that_do_not_pin_theirs(
    env: Env, namespace: str
) -> None:
    """docs/operator.md's staged rollout through the chart's values: pin one cluster,
    upgrade the default images, see only the other roll; release the pin, see it roll."""
    cluster = env.cluster
    rolling = apply_example(cluster, "gpt-oss-120b-b200.yaml", namespace)
    pinned = apply_example(cluster, "gpt-oss-20b-h100.yaml", namespace)
    for name in (rolling, pinned):
        wait_ready(cluster, namespace, name)
    old = {"frontend": FRONTEND_IMAGE, "prefill": TRTLLM_IMAGE, "decode": TRTLLM_IMAGE}
    assert images_only(pod_images(cluster, namespace, pinned)) == old
    before = pod_images(cluster, namespace, pinned)
    pin = {"frontend": {"image": FRONTEND_IMAGE}, "engine": {"image": TRTLLM_IMAGE}}
    cluster.patch_ic(namespace, pinned, pin)
    wait_ready(cluster, namespace, pinned)
    assert pod_images(cluster, namespace, pinned) == before  # pinning changed no pod

    new = {pool: image.replace(":0.1.0", ":0.2.0") for pool, image in old.items()}
    try:
        env.upgrade("dataPlane.image.tag=0.2.0", "dataPlane.trtllmImage.tag=0.2.0")
        eventually(
            lambda: images_only(pod_images(cluster, namespace, rolling)) == new,
            "the unpinned cluster on the new images",
        )
        wait_ready(cluster, namespace, rolling)
        assert pod_images(cluster, namespace, pinned) == before  # not even a new generation

        unpin = [{"op": "remove", "path": f"/spec/{f}/image"} for f in ("frontend", "engine")]
        cluster.kubectl(
            "patch", "ic", pinned, "-n", namespace, "--type=json", "-p", json.dumps(unpin)
        )
        eventually(
            lambda: images_only(pod_images(cluster, namespace, pinned)) == new,
            "the released cluster on the new images",
        )
        wait_ready(cluster, namespace, pinned)
    finally:
        env.upgrade("dataPlane.image.tag=", "dataPlane.trtllmImage.tag=")


# --------------------------------------------------------------------------- capacity


def test_a_gpu_too_small_is_rejected_with_the_numbers(env: Env, namespace: str) -> None:
    cluster = env.cluster
    # gpt-oss-120b at TP1 on 80 GB H100s with 64 sequences of 32k per decode worker.
    too_big = {"name": "openai/gpt-oss-120b", "source": "pvc://models/gpt-oss-120b"}
    name = apply_example(
        cluster,
        "gpt-oss-20b-h100.yaml",
        namespace,
        model=too_big,
        autoscaling={"decode": {"targetActiveSequencesPerReplica": 64}},
    )

    def refused() -> bool:
        return cluster.condition(cluster.ic(namespace, name), "Degraded").get("reason") == (
            "InsufficientGPUMemory"
        )

    eventually(refused, "Degraded=InsufficientGPUMemory")
    obj = cluster.ic(namespace, name)
    message = cluster.condition(obj, "Degraded")["message"]
    for needle in ("decode pool", "gpt-oss-120b at TP1 on NVIDIA H100", "does not fit", "GiB"):
        assert needle in message, message
    assert "TP2 would fit" in message
    assert cluster.condition(obj, "Ready")["status"] == "False"
    # Nothing of the refused generation exists: no pool, no workload, no pod.
    for kind in ("workerpools", "deployments", "pods"):
        assert not cluster.items(kind, "-n", namespace, "-l", f"tandem.dev/cluster={name}")

    # Taking the advice rolls the cluster out.
    cluster.patch_ic(namespace, name, {"decode": {"tensorParallelSize": 2, "gpusPerWorker": 2}})
    wait_ready(cluster, namespace, name)
    generation = cluster.ic(namespace, name)["metadata"]["generation"]

    # An edit that does not fit leaves the running generation alone.
    cluster.patch_ic(namespace, name, {"decode": {"tensorParallelSize": 1, "gpusPerWorker": 1}})
    eventually(refused, "Degraded=InsufficientGPUMemory after the edit")
    obj = cluster.ic(namespace, name)
    assert obj["status"]["observedGeneration"] == generation
    decode = cluster.get_json("deploy", f"{name}-decode", "-n", namespace)
    limits = decode["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    assert decode["status"]["readyReplicas"] == 2
