"""The whole cluster to zero, on the real node: Tandem's images on a real kubelet, the
operator in-cluster (``helm install``), the official ``openai`` client through
``kubectl port-forward svc/...-frontend``.

With ``decode.minReplicas: 0`` and ``prefill.minReplicas: 0`` under the builtin
autoscaler, the idle CPU example drains to no worker pod while its status says
``ScaledToZero`` (Ready, not Degraded) and the frontend stays Ready; the first request
then waits while the autoscaler starts a decode pod (it reads the frontend's waiting
request from its metrics port) and is answered, with no 404 or 503; idle again, the pool
goes back to zero after its idle window. The cold start (request sent -> first token,
as the client sees it) is written to build/e2e/scale-to-zero-figures.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tandem.devcluster import DevCluster
from tandem.devcluster.probes import wait_until
from tandem.devimages import TANDEM_IMAGE

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tandem"
EXAMPLE = REPO / "manifests" / "examples" / "reference-cpu.yaml"
HELM = Path(sys.executable).parent / "helm"
FIGURES_FILE = REPO / "build" / "e2e" / "scale-to-zero-figures.json"
RELEASE, SYSTEM_NS, NS, NAME = "tandem", "tandem-system", "zero", "reference"
REPOSITORY, TAG = TANDEM_IMAGE.rsplit(":", 1)
WAIT_S = 300.0
# Long enough to watch the pool drain and come back within the test; production keeps
# the default (300 s) or more, see docs/autoscaling.md.
IDLE_TO_ZERO_S = 10
COLD_START_TIMEOUT_S = 240
Json = dict[str, Any]
FIGURES: dict[str, Any] = {}


class Zero:
    def __init__(self, cluster: DevCluster, port_forward: Any) -> None:
        self.cluster = cluster
        self.port_forward = port_forward

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, **kw)

    def get(self, *args: str) -> Json:
        out: Json = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return out

    def helm(self, *args: str) -> None:
        argv = [str(HELM), f"--kubeconfig={self.cluster.kubeconfig}", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"

    def workers(self) -> list[Json]:
        pods: list[Json] = self.get(
            "pods", "-n", NS, "-l", f"tandem.dev/cluster={NAME},tandem.dev/role in (prefill,decode)"
        )["items"]
        return pods

    def replicas(self, role: str) -> int | None:
        """The pool's /scale target; None until the operator has created the pool."""
        found = self.kubectl(
            "get", "workerpool", f"{NAME}-{role}", "-n", NS, "-o", "json", "--ignore-not-found"
        ).stdout
        return int(json.loads(found)["spec"]["replicas"]) if found.strip() else None

    def condition(self, kind: str) -> Json:
        ic = self.get("ic", NAME, "-n", NS)
        found = [c for c in (ic.get("status") or {}).get("conditions") or () if c["type"] == kind]
        return dict(found[0]) if found else {}

    def at_zero(self) -> bool:
        return (
            self.replicas("decode") == 0
            and self.replicas("prefill") == 0
            and not self.workers()
            and self.condition("Ready").get("reason") == "ScaledToZero"
        )

    def metrics(self) -> str:
        """The frontend's /metrics from its metrics port (9091)."""
        with self.port_forward(self.cluster, f"deploy/{NAME}-frontend", 9091, namespace=NS) as port:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

    def describe(self) -> str:
        parts = [self.kubectl("get", "pods,workerpools,ic", "-A", "-o", "wide", check=False).stdout]
        for ns, selector in ((NS, "tandem.dev/role=frontend"), (SYSTEM_NS, "")):
            args = ["logs", "-n", ns, "--tail=40", "--prefix", "--all-containers"]
            args += ["-l", selector or "app.kubernetes.io/name=tandem"]
            parts.append(self.kubectl(*args, check=False).stdout)
        return "\n".join(parts)


def metric(text: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def render_cluster_manifest() -> Json:
    """The CPU example, allowed to scale to zero under the builtin autoscaler."""
    doc: Json = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = NS
    spec = doc["spec"]
    spec["frontend"]["apiKeys"] = {"required": False}
    spec["frontend"]["coldStartTimeoutSeconds"] = COLD_START_TIMEOUT_S
    # Chat prompts stay on the decode worker: only the decode pool has to come back.
    spec["frontend"]["disaggregation"]["minPrefillTokens"] = 4096
    for role in ("prefill", "decode"):
        spec[role]["resources"]["requests"]["cpu"] = "250m"
    spec["prefill"].update(replicas=0, minReplicas=0)
    spec["decode"].update(replicas=1, minReplicas=0)  # one to start: it must drain
    spec["autoscaling"] = {
        "enabled": True,
        "intervalSeconds": 2,
        "decode": {"scaleDownStabilizationSeconds": 4, "scaleToZeroIdleSeconds": IDLE_TO_ZERO_S},
    }
    return doc


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


@pytest.fixture(scope="module")
def zero(real_node_slot: Any, port_forward: Any, request: pytest.FixtureRequest) -> Iterator[Zero]:
    failed_before = request.session.testsfailed
    trip = Zero(real_node_slot.get(), port_forward)
    trip.helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        SYSTEM_NS,
        "--create-namespace",
        "--set",
        f"image.repository={REPOSITORY},image.tag={TAG},image.pullPolicy=Never",
        "--set",
        "dataPlane.pullPolicy=Never",
        "--wait",
        "--timeout=5m",
    )
    trip.kubectl("create", "namespace", NS)
    trip.kubectl("apply", "-f", "-", input=yaml.safe_dump(render_cluster_manifest()))
    try:
        yield trip
    finally:
        FIGURES_FILE.parent.mkdir(parents=True, exist_ok=True)
        FIGURES_FILE.write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")
        print(f"\nscale-to-zero figures ({FIGURES_FILE}): {json.dumps(FIGURES, sort_keys=True)}")
        if request.session.testsfailed > failed_before:
            print(trip.describe())
        trip.kubectl("delete", "ic", "--all", "-n", NS, "--wait=true", check=False)
        trip.helm("uninstall", RELEASE, "--namespace", SYSTEM_NS, "--wait")
        trip.kubectl("delete", "namespace", NS, SYSTEM_NS, "--wait=true", check=False)


def test_an_idle_cluster_drains_to_no_worker_and_says_so(zero: Zero) -> None:
    eventually(lambda: zero.replicas("decode") == 1, "the decode pool to start at one")
    eventually(zero.at_zero, "the idle cluster to scale to zero")
    ready = zero.condition("Ready")
    assert ready["status"] == "True", ready
    assert "scaled to zero" in ready["message"]
    assert zero.condition("Degraded").get("status") == "False"
    # The frontend stays Ready (it takes the first request) while no worker runs.
    frontend = zero.get("deploy", f"{NAME}-frontend", "-n", NS)
    assert frontend["status"].get("readyReplicas") == 1


def test_the_first_request_waits_for_a_cold_start_and_is_answered(zero: Zero) -> None:
    assert zero.at_zero()
    with zero.port_forward(zero.cluster, f"svc/{NAME}-frontend", 8000, namespace=NS) as port:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="none",
            max_retries=0,
            timeout=COLD_START_TIMEOUT_S + 60,
        )
        sent, sent_at = time.monotonic(), time.time()
        stream = client.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            stream=True,
        )
        first_token_at, text, finish = None, "", None
        for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.delta.content:
                first_token_at = first_token_at or time.monotonic()
                text += choice.delta.content
            finish = choice.finish_reason or finish
    assert first_token_at is not None and text, "no token streamed"
    assert finish in ("stop", "length")
    FIGURES["cold_start_first_token_s"] = round(first_token_at - sent, 1)
    # Where the time went: the autoscaler's reaction (request -> pod created, whole
    # seconds: the API server's timestamps) and the pod's own start (created -> Ready).
    selector = f"tandem.dev/cluster={NAME},tandem.dev/role=decode"
    (pod,) = zero.get("pods", "-n", NS, "-l", selector)["items"]  # one worker, not more
    created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    FIGURES["request_to_decode_pod_created_s"] = round(created.timestamp() - sent_at, 1)
    FIGURES["decode_pod_created_to_ready_s"] = round(
        (datetime.fromisoformat(ready["lastTransitionTime"]) - created).total_seconds(), 1
    )

    text_metrics = zero.metrics()
    served = metric(text_metrics, "tandem_router_cold_start_wait_seconds_count", outcome="served")
    assert served == 1
    waited = metric(text_metrics, "tandem_router_cold_start_wait_seconds_sum", outcome="served")
    FIGURES["cold_start_wait_in_frontend_s"] = round(waited, 1)
    for status in ("404", "503"):
        assert metric(text_metrics, "tandem_frontend_requests_total", status=status) == 0
    events = zero.get("events", "-n", NS, "--field-selector", f"involvedObject.name={NAME}")
    reasons = {e.get("reason") for e in events["items"]}
    assert "DemandWhileScaledToZero" in reasons, reasons


def test_idle_again_it_goes_back_to_zero_after_its_idle_window(zero: Zero) -> None:
    answered = time.monotonic()
    eventually(zero.at_zero, "the cluster to scale back to zero")
    FIGURES["answer_to_zero_again_s"] = round(time.monotonic() - answered, 1)
    FIGURES["scale_to_zero_idle_seconds"] = IDLE_TO_ZERO_S
