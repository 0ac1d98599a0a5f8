"""The user's journey, for real: Tandem's own images on a real kubelet, reached the way
users reach it (docs/port-forward.md walks the same steps).

On the real-node cluster (``real_node_cluster``: kubelet + containerd on this machine,
the images of ``make images`` imported) and with the CPU example: ``helm install`` (the
operator runs in-cluster, two replicas, Lease leader election) -> ``kubectl apply`` ->
``tandem keys add`` (the frontend requires an API key) -> ``kubectl wait
--for=condition=Ready`` -> ``kubectl port-forward svc/...-frontend`` (a real subprocess) ->
the official ``openai`` client with that key; keys are added and revoked while the
frontend runs (no restart), and /metrics is served only on the frontend's metrics port
(9091), not on the API port. Then, under steady client load with
client retries off: scale decode 1 -> 2, kill one decode pod outright mid-answer (its
requests go on on the other: zero failed), back to 1, and delete the prefill pod (zero
failed requests); a burst of long prompts grows the prefill pool through the in-cluster
autoscaler and the new pod serves; the leader operator pod is killed and a spec edit still
converges; ``helm upgrade`` and an engine setting change roll pods (zero failed requests);
deleting the InferenceCluster leaves no child and no container. Then a tensor-parallel
cluster: its decode worker split across the two pods of a LeaderWorkerSet group under Ray
(each rank on its own pod, the leader resolving through the node's cluster DNS) answers
the chat questions the TP1 cluster answered, word for word. Last, the same cluster
under ``planning.mode: auto``: its profiling Job runs on the real kubelet, the pools take
the plan made from that table, and short prompts re-plan it to fewer workers under load
(zero failed requests).

Tests run in file order and share one installation. Figures (pod create -> Ready, node
memory, wall time) are printed at the end of the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
TANDEM = Path(sys.executable).parent / "tandem"
RELEASE = "tandem"
SYSTEM_NS = "tandem-system"
NS = "journey"
NAME = "reference"
REAL_NODE_NAME = "localhost"
REPOSITORY, TAG = TANDEM_IMAGE.rsplit(":", 1)
WAIT_S = 240.0
# A key added to the Secret works once the kubelet has refreshed the frontend's mounted
# copy (its pod sync period, 10 s on the dev node, plus jitter) and the frontend re-read
# it (5 s).
KEY_WAIT_S = 120.0
FRONTEND_METRICS_PORT = 9091
Json = dict[str, Any]
RESTRICTED = (
    "pod-security.kubernetes.io/enforce=restricted",
    "pod-security.kubernetes.io/enforce-version=latest",
)

FIGURES: dict[str, Any] = {}


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


# ---------------------------------------------------------------------------- load


def long_prompt(tag: str, words: int = 300) -> str:
    """A prompt long enough to prefill remotely; ``tag`` first, so no two share a cached
    prefix."""
    sentence = "Disaggregated serving splits prefill and decode across two pools of workers."
    return f"Request {tag}. " + " ".join([sentence] * (words // 11))


@dataclass
class SteadyLoad:
    """``concurrency`` openai clients sending chat requests back to back (short and long
    prompts alternating, or short ones only) until stopped; client retries are off, so
    every failure counts."""

    base_url: str
    api_key: str
    concurrency: int = 2
    max_tokens: int = 4
    long_prompts: bool = True
    max_requests: int = 2000
    model: str = NAME
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    _sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> SteadyLoad:
        self._threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True)
            for i in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)

    def wait_for(self, answered: int, timeout_s: float = WAIT_S) -> None:
        """Until ``answered`` requests succeeded; the first failure ends the wait."""
        wait_until(
            lambda: self.ok >= answered,
            timeout_s=timeout_s,
            what=f"{answered} answered requests ({self.ok} so far)",
            abort=lambda: f"a request failed: {self.failures[0]}" if self.failures else None,
        )

    def _client(self, index: int) -> None:
        client = openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=120.0
        )
        n = 0
        while not self._stop.is_set():
            with self._lock:
                if self._sent >= self.max_requests:
                    return
                self._sent += 1
            n += 1
            text = long_prompt(f"{index}-{n}") if n % 2 and self.long_prompts else "Say hello."
            try:
                reply = client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": text}],
                    max_tokens=self.max_tokens,
                )
                assert reply.choices[0].finish_reason in ("stop", "length")
            except (openai.OpenAIError, AssertionError) as exc:
                with self._lock:
                    self.failures.append(repr(exc)[:300])
            else:
                with self._lock:
                    self.ok += 1


# ------------------------------------------------------------------------ cluster


@dataclass
class Journey:
    cluster: DevCluster
    port_forward: Any
    started: float = field(default_factory=time.monotonic)
    api_key: str = ""  # the key the journey's clients use (tandem keys add)
    greedy_answers: list[str] = field(default_factory=list)  # TP_QUESTIONS, at TP1

    def keys(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``tandem keys ARGS -n journey``, as a user runs it (KUBECONFIG set)."""
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
        result = subprocess.run(
            [str(TANDEM), "keys", *args, "-n", NS],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        assert result.returncode == 0, f"tandem keys {' '.join(args)}:\n{result.stderr}"
        return result

    def add_key(self, tenant: str, key_id: str) -> str:
        """``tandem keys add reference --tenant TENANT --id KEY_ID``: the key it printed."""
        result = self.keys("add", NAME, "--tenant", tenant, "--id", key_id)
        key = result.stdout.strip()
        assert key and "\n" not in key, result.stdout
        assert key_id in result.stderr and key not in result.stderr
        return key

    def client(self, base_url: str, api_key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=base_url, api_key=api_key or self.api_key, max_retries=0, timeout=60.0
        )

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, **kw)

    def get(self, *args: str) -> Json:
        out: Json = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return out

    def helm(self, *args: str) -> str:
        argv = [str(HELM), f"--kubeconfig={self.cluster.kubeconfig}", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    def pods(self, role: str, *, ready_only: bool = False, cluster: str = NAME) -> list[Json]:
        items: list[Json] = self.get(
            "pods", "-n", NS, "-l", f"tandem.dev/cluster={cluster},tandem.dev/role={role}"
        )["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return [p for p in live if _ready(p)] if ready_only else live

    def terminating(self, role: str) -> list[str]:
        items: list[Json] = self.get(
            "pods", "-n", NS, "-l", f"tandem.dev/cluster={NAME},tandem.dev/role={role}"
        )["items"]
        return [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")]

    def pool_replicas(self, role: str) -> int:
        return int(self.get("workerpool", f"{NAME}-{role}", "-n", NS)["spec"]["replicas"])

    def ic_ready(self) -> bool:
        ic = self.get("ic", NAME, "-n", NS)
        status = ic.get("status") or {}
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ()
        )
        return ready and status.get("observedGeneration") == ic["metadata"]["generation"]

    @contextlib.contextmanager
    def frontend(self) -> Iterator[str]:
        """``kubectl port-forward svc/reference-frontend`` -> the /v1 base URL.

        A port-forward pins one pod, and ``svc/`` may pick one that is terminating after
        a rollout (it drains: new requests get 503): like a user, wait for the rollout to
        finish before forwarding."""
        self.kubectl(
            "rollout",
            "status",
            f"deployment/{NAME}-frontend",
            "-n",
            NS,
            "--timeout=240s",
            timeout_s=260,
        )
        eventually(lambda: not self.terminating("frontend"), "old frontend pods to be gone")
        with self.port_forward(self.cluster, f"svc/{NAME}-frontend", 8000, namespace=NS) as port:
            yield f"http://127.0.0.1:{port}/v1"

    def describe(self) -> str:
        """Pods, and the tails of the frontend's and operators' logs (for failures)."""
        parts = [self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout]
        for ns, selector in ((NS, "tandem.dev/role=frontend"), (SYSTEM_NS, "")):
            args = ["logs", "-n", ns, "--tail=40", "--prefix", "--all-containers"]
            args += ["-l", selector or "app.kubernetes.io/name=tandem"]
            parts.append(self.kubectl(*args, check=False).stdout)
        return "\n".join(parts)

    def metrics(self, cluster: str = NAME) -> str:
        """The frontend's /metrics, from its metrics port (9091: not the API port), like
        ``kubectl port-forward deploy/reference-frontend 9091``."""
        pod = self.pods("frontend", ready_only=True, cluster=cluster)[0]["metadata"]["name"]
        with self.port_forward(
            self.cluster, f"pod/{pod}", FRONTEND_METRICS_PORT, namespace=NS
        ) as port:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text


def migrations(metrics_text: str, outcome: str) -> float:
    """``tandem_router_migrations_total{outcome}`` in a frontend's /metrics (0 before the
    first one: a labelled counter appears once observed)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == "tandem_router_migrations_total"
        and sample.labels.get("outcome") == outcome
    )


def key_works(base_url: str, api_key: str) -> bool:
    """Whether the frontend accepts ``api_key`` (False on 401 only)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30.0)
    try:
        client.models.list()
    except openai.AuthenticationError:
        return False
    return True


def _ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _seconds_to_ready(pod: Json) -> float:
    created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
    for c in pod["status"]["conditions"]:
        if c["type"] == "Ready":
            return (datetime.fromisoformat(c["lastTransitionTime"]) - created).total_seconds()
    raise AssertionError(f"pod {pod['metadata']['name']} is not Ready")


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def render_cluster_manifest() -> Json:
    """The CPU example as a user would adapt it to a 2-core node: small CPU requests, and
    autoscaling on in ``external`` mode so that ``kubectl scale`` is obeyed (a later step
    hands the pools to the builtin autoscaler)."""
    doc: Json = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = NS
    for role in ("prefill", "decode"):
        doc["spec"][role]["resources"]["requests"]["cpu"] = "250m"
    doc["spec"]["autoscaling"] = {
        "enabled": True,
        "mode": "external",
        "intervalSeconds": 2,
        "prefill": {
            # SmolLM2 prefills ~265 tokens/s here: four ~400-token prompts queued are a
            # backlog worth a second worker, and no request waits long behind the others.
            "targetQueuedTokensPerReplica": 512,
            "scaleUpStabilizationSeconds": 0,
            "scaleDownStabilizationSeconds": 600,
            "maxStepUp": 1,
        },
        "decode": {"scaleDownStabilizationSeconds": 600},
    }
    return doc


@pytest.fixture(scope="module")
def journey(
    real_node_slot: Any, port_forward: Any, request: pytest.FixtureRequest
) -> Iterator[Journey]:
    failed_before = request.session.testsfailed
    cluster: DevCluster = real_node_slot.get()
    trip = Journey(cluster, port_forward)
    # The operator's and the cluster's namespaces enforce the "restricted" Pod Security
    # Standard: every pod of this journey must pass it on the real API server.
    for namespace in (SYSTEM_NS, NS):
        trip.kubectl("create", "namespace", namespace)
        trip.kubectl("label", "namespace", namespace, *RESTRICTED)
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
    try:
        yield trip
    finally:
        FIGURES["journey_wall_s"] = round(time.monotonic() - trip.started, 1)
        # Kept for docs/benchmarks.md's real-node figures (pytest -q shows no print).
        figures = REPO / "build" / "e2e" / "journey-figures.json"
        figures.parent.mkdir(parents=True, exist_ok=True)
        figures.write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")
        print(f"\njourney figures ({figures}): {json.dumps(FIGURES, sort_keys=True)}")
        if request.session.testsfailed > failed_before:
            print(trip.describe())
        trip.kubectl("delete", "ic", "--all", "-n", NS, "--wait=true", check=False)
        trip.helm("uninstall", RELEASE, "--namespace", SYSTEM_NS, "--wait")
        trip.kubectl("delete", "namespace", NS, SYSTEM_NS, "--wait=true", check=False)


# -------------------------------------------------------------------------- steps


def test_operator_runs_in_cluster_with_a_leader(journey: Journey) -> None:
    pods = journey.get("pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/name=tandem")["items"]
    assert len(pods) == 2 and all(_ready(p) for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {REAL_NODE_NAME}
    lease = journey.get("lease", "tandem-operator", "-n", SYSTEM_NS)
    holder = lease["spec"]["holderIdentity"]
    assert any(holder.startswith(p["metadata"]["name"]) for p in pods), holder


def test_apply_and_wait_until_ready(journey: Journey) -> None:
    journey.kubectl("apply", "-f", "-", input=json.dumps(render_cluster_manifest()))
    # The frontend requires a key: made right after the apply (README), so the Secret is
    # usually there before the frontend pod mounts it.
    journey.api_key = journey.add_key("journey", "journey-1")
    # What a user types (docs/port-forward.md, step 1).
    journey.kubectl(
        "wait", "--for=condition=Ready", f"ic/{NAME}", "-n", NS, "--timeout=300s", timeout_s=330
    )
    for role in ("frontend", "prefill", "decode"):
        pods = journey.pods(role, ready_only=True)
        assert len(pods) == 1, role
        # Every data-plane pod runs for real, from our image, on the real node.
        assert pods[0]["spec"]["nodeName"] == REAL_NODE_NAME
        assert pods[0]["spec"]["containers"][0]["image"] == TANDEM_IMAGE
        FIGURES[f"{role}_create_to_ready_s"] = _seconds_to_ready(pods[0])


def test_openai_client_through_port_forward(journey: Journey) -> None:
    with journey.frontend() as base_url:
        # The key was made before the frontend started, or the kubelet brings it soon.
        eventually(lambda: key_works(base_url, journey.api_key), "the key", KEY_WAIT_S)
        client = journey.client(base_url)
        assert [m.id for m in client.models.list().data] == [NAME]
        reply = client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        assert reply.usage is not None and reply.usage.completion_tokens > 0
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=NAME,
                messages=[{"role": "user", "content": "Count to five"}],
                max_tokens=8,
                stream=True,
            )
            if chunk.choices
        )
        assert streamed
        completion = client.completions.create(model=NAME, prompt="Once upon", max_tokens=4)
        assert completion.choices[0].text
        # For the tensor-parallel cluster's step, after this one is gone.
        journey.greedy_answers = _greedy_answers(client, NAME)
        # A bad request gets an OpenAI-shaped 4xx, not a stack trace.
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "Hi"}]
            )
        assert missing.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(
                model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=-1
            )
        assert bad.value.status_code == 400 and isinstance(bad.value.body, dict)


def test_api_keys_are_required_added_and_revoked_without_a_restart(journey: Journey) -> None:
    """No key: 401; a wrong key: 401; a second key of the same tenant starts working and
    the first, revoked, stops, while the same frontend pod keeps running. The API port
    serves no /metrics."""
    (pod,) = journey.pods("frontend", ready_only=True)
    before = (pod["metadata"]["uid"], pod["status"]["containerStatuses"][0]["restartCount"])
    first = journey.api_key
    with journey.frontend() as base_url:
        body = {"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        # The openai client refuses an empty key: a plain request has none.
        keyless = httpx.post(f"{base_url}/chat/completions", json=body, timeout=30)
        assert keyless.status_code == 401, keyless.text
        assert keyless.headers["www-authenticate"].startswith("Bearer")
        assert keyless.json()["error"]["code"] == "missing_api_key"
        assert keyless.json()["error"]["type"] == "invalid_request_error"
        with pytest.raises(openai.AuthenticationError) as wrong:
            journey.client(base_url, "sk-not-a-key-of-this-cluster").models.list()
        assert wrong.value.status_code == 401 and wrong.value.code == "invalid_api_key"
        assert [m.id for m in journey.client(base_url, first).models.list().data] == [NAME]

        # Rotation: a second key for the tenant, then the first one revoked.
        second = journey.add_key("journey", "journey-2")
        assert second != first
        added = time.monotonic()
        eventually(lambda: key_works(base_url, second), "the second key", KEY_WAIT_S)
        FIGURES["api_key_added_to_working_s"] = round(time.monotonic() - added, 1)
        listed = journey.keys("list", NAME).stdout
        assert "journey-1" in listed and "journey-2" in listed
        assert first not in listed and second not in listed  # ids only, never keys
        journey.keys("revoke", NAME, "journey-1")
        revoked = time.monotonic()
        eventually(lambda: not key_works(base_url, first), "the revoked key", KEY_WAIT_S)
        FIGURES["api_key_revoked_to_refused_s"] = round(time.monotonic() - revoked, 1)
        journey.api_key = second
        hi: Any = [{"role": "user", "content": "Hi"}]
        reply = journey.client(base_url).chat.completions.create(
            model=NAME, messages=hi, max_tokens=2
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.AuthenticationError):
            journey.client(base_url, first).chat.completions.create(
                model=NAME, messages=hi, max_tokens=2
            )

        # /metrics is on the metrics port only (9091), not the API port.
        assert httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).status_code == 404
        assert httpx.get(base_url.removesuffix("/v1") + "/healthz", timeout=10).status_code == 200
    assert "tandem_" in journey.metrics()
    (pod,) = journey.pods("frontend", ready_only=True)
    after = (pod["metadata"]["uid"], pod["status"]["containerStatuses"][0]["restartCount"])
    assert after == before  # keys came and went without a restart


def test_metrics_show_remote_prefill_and_kv_moved_between_pods(journey: Journey) -> None:
    with journey.frontend() as base_url:
        client = journey.client(base_url)
        reply = client.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": long_prompt("metrics")}],
            max_tokens=4,
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
    text = journey.metrics()
    assert metric_sum(text, "tandem_router_prefill_decisions_total", path="remote") >= 1
    assert metric_sum(text, "tandem_router_kv_transfer_bytes_total") > 0


# Run inside a pod: open a TCP connection to HOST:PORT, then a TLS handshake without a
# client certificate, and say how far it got.
_PEER_PROBE = """
import socket, ssl, sys
try:
    sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
except OSError as exc:
    print("tcp-refused", exc)
    raise SystemExit
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
try:
    tls = context.wrap_socket(sock, server_hostname="intruder")
    tls.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n")
    data = tls.recv(64)
    print("tls-answered" if data else "tls-refused (closed)", data)
except (ssl.SSLError, OSError) as exc:
    print("tls-refused", exc)
"""

# Run inside a worker pod: the local addresses listening on PORT (from /proc/net/tcp).
_LISTENERS = """
import ipaddress, struct, sys
port = int(sys.argv[1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        fields = line.split()
        ip, p = fields[1].split(":")
        if fields[3] == "0A" and int(p, 16) == port:
            raw = b"".join(struct.pack("<I", int(ip[i : i + 8], 16)) for i in range(0, len(ip), 8))
            address = ipaddress.ip_address(raw)
            print(getattr(address, "ipv4_mapped", None) or address)
"""


def test_only_the_clusters_own_pods_are_served(journey: Journey) -> None:
    """A pod outside the cluster (an operator pod, in another namespace, which the
    workers' NetworkPolicy does not admit) gets nothing from a worker: the bridge CNI of
    this node enforces no NetworkPolicy, so it may connect, and mutual TLS refuses it.
    Workers listen on their pod IP only; nobody on the network can drain anything."""
    policy = journey.get("networkpolicy", f"{NAME}-workers", "-n", NS)
    assert policy["spec"]["podSelector"]["matchLabels"] == {"tandem.dev/cluster": NAME}
    # The frontends': the API port from anywhere (keys decide), the metrics port only from
    # the in-cluster operator's pods (the chart's labels, in its namespace).
    front = journey.get("networkpolicy", f"{NAME}-frontend", "-n", NS)["spec"]
    assert front["podSelector"]["matchLabels"]["tandem.dev/role"] == "frontend"
    api_rule, metrics_rule = front["ingress"]
    assert api_rule == {"ports": [{"protocol": "TCP", "port": 8000}]}
    assert metrics_rule["ports"] == [{"protocol": "TCP", "port": FRONTEND_METRICS_PORT}]
    assert metrics_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SYSTEM_NS}},
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "tandem",
                    "app.kubernetes.io/component": "operator",
                }
            },
        }
    ]
    secret = journey.get("secret", f"{NAME}-credentials", "-n", NS)
    assert set(secret["data"]) >= {"ca.crt", "tls.crt", "tls.key"}
    outsider = journey.get("pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/name=tandem")["items"][
        0
    ]["metadata"]["name"]
    for role in ("prefill", "decode"):
        pod = journey.pods(role, ready_only=True)[0]
        ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
        listening = journey.kubectl(
            "exec", "-n", NS, name, "--", "python", "-c", _LISTENERS, "50051"
        ).stdout.split()
        assert listening == [ip], listening  # not 0.0.0.0
        probe = journey.kubectl(
            "exec", "-n", SYSTEM_NS, outsider, "--", "python", "-c", _PEER_PROBE, ip, "50051"
        ).stdout
        FIGURES["network_policy_enforced"] = probe.startswith("tcp-refused")
        assert probe.startswith(("tcp-refused", "tls-refused")), probe
    with journey.frontend() as base_url:
        drain = httpx.post(base_url.removesuffix("/v1") + "/drain", timeout=10)
        assert drain.status_code == 404
        ready = httpx.get(base_url.removesuffix("/v1") + "/readyz", timeout=10)
        assert ready.status_code == 200


def test_scale_decode_and_delete_prefill_under_load_loses_nothing(journey: Journey) -> None:
    with journey.frontend() as base_url, SteadyLoad(base_url, journey.api_key) as load:
        load.wait_for(4)
        journey.kubectl("scale", "workerpool", f"{NAME}-decode", "-n", NS, "--replicas=2")
        eventually(lambda: len(journey.pods("decode", ready_only=True)) == 2, "2 decode pods")
        load.wait_for(load.ok + 6)  # the router has had time to use both
        # A decode pod killed outright (no drain) while answers are being generated on
        # it: each of its requests goes on on the other decode pod (stream migration).
        resumed_before = migrations(journey.metrics(), "resumed")
        with SteadyLoad(base_url, journey.api_key, max_tokens=48, long_prompts=False) as answers:
            answers.wait_for(2)
            victim = journey.pods("decode", ready_only=True)[0]["metadata"]["name"]
            journey.kubectl(
                "delete", "pod", victim, "-n", NS, "--grace-period=0", "--force", check=False
            )
            eventually(
                lambda: (
                    len(journey.pods("decode", ready_only=True)) == 2
                    and victim not in [p["metadata"]["name"] for p in journey.pods("decode")]
                ),
                "a replacement decode pod",
            )
            answers.wait_for(answers.ok + 4)
        assert answers.failures == [], answers.failures
        FIGURES["decode_kill_streams_resumed"] = (
            migrations(journey.metrics(), "resumed") - resumed_before
        )
        journey.kubectl("scale", "workerpool", f"{NAME}-decode", "-n", NS, "--replicas=1")
        eventually(lambda: len(journey.pods("decode")) == 1, "back to 1 decode pod")
        victim = journey.pods("prefill", ready_only=True)[0]["metadata"]["name"]
        journey.kubectl("delete", "pod", victim, "-n", NS, "--wait=false")
        eventually(
            lambda: (
                [p["metadata"]["name"] for p in journey.pods("prefill", ready_only=True)]
                not in ([], [victim])
            ),
            "a replacement prefill pod",
        )
        load.wait_for(load.ok + 6)
    assert load.failures == [], load.failures
    FIGURES["scale_and_kill_requests_answered"] = load.ok


def test_a_burst_of_long_prompts_grows_prefill_and_the_new_pod_serves(journey: Journey) -> None:
    journey.kubectl(
        "patch",
        "ic",
        NAME,
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"autoscaling": {"mode": "builtin"}}}),
    )
    before = {p["metadata"]["name"] for p in journey.pods("prefill")}
    with journey.frontend() as base_url:
        burst = SteadyLoad(base_url, journey.api_key, concurrency=4, max_tokens=1)
        with burst:
            eventually(lambda: journey.pool_replicas("prefill") >= 2, "the autoscaler to grow")
            eventually(
                lambda: any(
                    p["metadata"]["name"] not in before
                    for p in journey.pods("prefill", ready_only=True)
                ),
                "the new prefill pod to be Ready",
            )
            new = next(
                p["metadata"]["name"]
                for p in journey.pods("prefill", ready_only=True)
                if p["metadata"]["name"] not in before
            )

            def new_pod_served() -> bool:
                with journey.port_forward(journey.cluster, f"pod/{new}", 9090, namespace=NS) as p:
                    text = httpx.get(f"http://127.0.0.1:{p}/metrics", timeout=10).text
                return metric_sum(text, "tandem_worker_requests_total", rpc="prefill") > 0

            eventually(new_pod_served, f"{new} to serve a prefill")
    assert burst.failures == [], burst.failures


def scraped_names(text: str) -> set[str]:
    """Names of the samples in a Prometheus text exposition."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line.startswith("tandem_")}  # fmt: skip


def test_scraped_metric_names_are_saved_and_cover_the_dashboards_list(journey: Journey) -> None:
    """What the real pods expose (frontend, prefill and decode workers, the leading
    operator, after the autoscaler acted) goes to build/e2e/scraped-metric-names.json;
    tests/data/scraped-metric-names.json, which the chart's dashboard test trusts, must
    name nothing they no longer expose (copy the saved file over it after a change)."""
    components: dict[str, set[str]] = {"frontend": set(), "worker": set(), "operator": set()}
    components["frontend"] = scraped_names(journey.metrics())
    for role in ("prefill", "decode"):
        pod = journey.pods(role, ready_only=True)[0]["metadata"]["name"]
        with journey.port_forward(journey.cluster, f"pod/{pod}", 9090, namespace=NS) as port:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        components["worker"] |= scraped_names(text)
    holder = journey.get("lease", "tandem-operator", "-n", SYSTEM_NS)["spec"]["holderIdentity"]
    pods = journey.get("pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/name=tandem")["items"]
    leader = next(p["metadata"]["name"] for p in pods if holder.startswith(p["metadata"]["name"]))
    with journey.port_forward(journey.cluster, f"pod/{leader}", 8080, namespace=SYSTEM_NS) as port:
        components["operator"] = scraped_names(
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        )
    saved = {"components": {k: sorted(v) for k, v in components.items()}}
    out = REPO / "build" / "e2e" / "scraped-metric-names.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(saved, indent=2) + "\n")
    committed = json.loads((REPO / "tests" / "data" / "scraped-metric-names.json").read_text())
    for component, names in committed["components"].items():
        gone = set(names) - components[component]
        assert not gone, f"{component} no longer exposes {sorted(gone)}; see {out}"
    assert "tandem_operator_pool_replicas" in components["operator"]
    assert {"tandem_gpu_available", "tandem_gpu_healthy"} <= components["worker"]


def test_the_standby_operator_takes_over_and_edits_still_converge(journey: Journey) -> None:
    lease = journey.get("lease", "tandem-operator", "-n", SYSTEM_NS)
    leader = lease["spec"]["holderIdentity"]
    pods = journey.get("pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/name=tandem")["items"]
    leader_pod = next(
        p["metadata"]["name"] for p in pods if leader.startswith(p["metadata"]["name"])
    )
    journey.kubectl("delete", "pod", leader_pod, "-n", SYSTEM_NS, "--wait=false")

    def new_leader() -> bool:
        holder = journey.get("lease", "tandem-operator", "-n", SYSTEM_NS)["spec"].get(
            "holderIdentity"
        )
        return bool(holder) and not holder.startswith(leader_pod)

    eventually(new_leader, "another operator replica to hold the Lease", timeout_s=60)
    journey.kubectl(
        "patch",
        "ic",
        NAME,
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"frontend": {"maxQueuedRequests": 128}}}),
    )
    eventually(journey.ic_ready, "the edit to converge under the new leader")
    config = journey.get("configmap", f"{NAME}-config", "-n", NS)["data"]["frontend.json"]
    assert json.loads(config)["frontend"]["maxQueuedRequests"] == 128


def test_upgrades_roll_pods_without_failing_a_request(journey: Journey) -> None:
    workers_before = {p["metadata"]["name"] for r in ("prefill", "decode") for p in journey.pods(r)}
    with journey.frontend() as base_url, SteadyLoad(base_url, journey.api_key) as load:
        load.wait_for(2)
        # The platform team upgrades the release (the operator pods roll; the new leader
        # must not disturb what runs) ...
        journey.helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            SYSTEM_NS,
            "--reuse-values",
            "--set",
            "operator.logLevel=debug",
            "--wait",
            "--timeout=5m",
        )
        # ... and the model owner changes an engine setting that KV depends on (rows per
        # BLAS call decide rounding: part of the config digest), so every worker rolls and
        # for a while prefill and decode workers of both revisions run side by side.
        # Routing pairs a decode worker only with prefill workers of its own digest (else
        # it prefills locally), so no decode worker has to refuse a handoff.
        before = journey.metrics()
        journey.kubectl(
            "patch",
            "ic",
            NAME,
            "-n",
            NS,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"engine": {"options": {"row_tile": 16}}}}),
        )

        def rolled() -> bool:
            now = [p for r in ("prefill", "decode") for p in journey.pods(r)]
            return (
                bool(now)
                and not {p["metadata"]["name"] for p in now} & workers_before
                and all(_ready(p) for p in now)
            )

        # Up to three SmolLM2 workers reload the model, ~85 s each on this 2-core node
        # (one after another within a pool): more than the default wait.
        eventually(rolled, "every worker pod to roll", timeout_s=2 * WAIT_S)
        eventually(journey.ic_ready, "Ready after the roll")
        load.wait_for(load.ok + 4)
    assert load.failures == [], load.failures
    FIGURES["upgrade_requests_answered"] = load.ok
    after = journey.metrics()

    def delta(name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    # The frontend does not roll (its config holds no engine setting): its counters span
    # the whole roll. A handoff refused for another revision's KV would mean routing mixed
    # revisions; one whose prefill pod went away mid-roll is counted apart.
    handoffs = "tandem_router_kv_handoff_failures_total"
    refused = delta(handoffs, reason="config_mismatch")
    FIGURES["roll_refused_handoffs"] = refused
    FIGURES["roll_failed_handoffs_prefilled_again"] = delta(handoffs, reason="failed")
    FIGURES["roll_prefills_kept_local_for_another_revision"] = delta(
        "tandem_router_prefill_decisions_total", reason="prefill_incompatible"
    )
    assert refused == 0
    node = journey.cluster.real_node
    assert node is not None
    FIGURES["node_daemons_rss_mib"] = {
        k: round(v / 2**20) for k, v in node.daemon_rss_bytes().items()
    }
    FIGURES["pods_rss_mib"] = round(node.pods_rss_bytes() / 2**20)


def test_deleting_the_cluster_leaves_no_child_and_no_container(journey: Journey) -> None:
    journey.kubectl("delete", "ic", NAME, "-n", NS, "--wait=true", timeout_s=300)
    kinds = ",".join(
        (
            "workerpools",
            "deployments",
            "replicasets",
            "pods",
            "services",
            "configmaps",
            "serviceaccounts",
            "roles",
            "rolebindings",
            "poddisruptionbudgets",
        )
    )

    def nothing_left() -> bool:
        items = journey.get(kinds, "-n", NS, "-l", f"tandem.dev/cluster={NAME}")["items"]
        return not items

    eventually(nothing_left, "every child to be garbage-collected")
    node = journey.cluster.real_node
    assert node is not None

    def no_containers() -> bool:
        listing = subprocess.run(
            [
                "ctr",
                "--address",
                str(node.containerd_socket),
                "-n",
                "k8s.io",
                "containers",
                "ls",
                f'labels."io.kubernetes.pod.namespace"=={NS}',
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return len(listing.stdout.strip().splitlines()) <= 1  # the header only

    eventually(no_containers, "every container of the cluster to be gone")


TP_NAME = "reference-tp2"
# The questions tests/unit/engines/test_reference_tensor_parallel.py answers with TP1 and
# TP2 in one process; here through two clusters, pods and frontends.
TP_QUESTIONS = ("What is the capital of France?", "Name three colours of the rainbow.")


def render_tensor_parallel_manifest() -> Json:
    """The CPU example with its prefill worker split across two pods (TP2, one rank per pod
    of a LeaderWorkerSet group under Ray) and a TP1 decode worker; every prompt goes to the
    prefill pool (``minPrefillTokens: 0``), so each answer's KV is the group's, gathered
    into the whole model's layout and pulled by the TP1 worker."""
    doc: Json = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] |= {"name": TP_NAME, "namespace": NS}
    doc["spec"]["model"]["servedName"] = TP_NAME
    doc["spec"]["frontend"]["disaggregation"]["minPrefillTokens"] = 0
    # Each pod holds a Ray node beside its rank (~0.4 GiB more than a worker alone), and
    # the leader the whole-layout copy of its KV pool.
    doc["spec"]["prefill"] |= {
        "replicas": 1,
        "minReplicas": 1,
        "maxReplicas": 1,
        "nodesPerWorker": 2,
        "tensorParallelSize": 2,
        "resources": {"requests": {"cpu": "250m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}},
    }
    doc["spec"]["decode"] |= {"replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    return doc


def _greedy_answers(client: openai.OpenAI, model: str) -> list[str]:
    answers = []
    for question in TP_QUESTIONS:
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": question}],
            max_tokens=12,
            temperature=0,
        )
        answers.append(reply.choices[0].message.content or "")
    return answers


def test_a_tensor_parallel_prefill_group_spans_two_pods_and_hands_kv_to_tp1(
    journey: Journey,
) -> None:
    """After the TP1 cluster is gone (both would not fit the node's two cores)."""
    journey.kubectl("apply", "-f", "-", input=json.dumps(render_tensor_parallel_manifest()))
    key = journey.keys("add", TP_NAME, "--tenant", "tp", "--id", "tp-1").stdout.strip()
    journey.kubectl(
        "wait", "--for=condition=Ready", f"ic/{TP_NAME}", "-n", NS, "--timeout=400s",
        timeout_s=430,
    )  # fmt: skip
    group = _tp_group(journey)
    assert len(group) == 2 and all(_ready(p) for p in group)
    assert {p["spec"]["nodeName"] for p in group} == {REAL_NODE_NAME}
    created = min(datetime.fromisoformat(p["metadata"]["creationTimestamp"]) for p in group)
    ready = max(
        datetime.fromisoformat(c["lastTransitionTime"])
        for p in group
        for c in p["status"]["conditions"]
        if c["type"] == "Ready"
    )
    FIGURES["ray_group_create_to_ready_s"] = (ready - created).total_seconds()
    token = journey.get("secret", f"{TP_NAME}-ray-token", "-n", NS)
    assert token["metadata"]["ownerReferences"][0]["name"] == TP_NAME

    expected = journey.greedy_answers  # the TP1 cluster's, asked before it was deleted
    with journey.port_forward(
        journey.cluster, f"svc/{TP_NAME}-frontend", 8000, namespace=NS
    ) as port:
        base = f"http://127.0.0.1:{port}/v1"
        eventually(lambda: key_works(base, key), "the tensor-parallel cluster's key", KEY_WAIT_S)
        answers = _greedy_answers(journey.client(base, key), TP_NAME)
    assert all(expected) and answers == expected
    # Both answers were prefilled by the group and decoded by the TP1 worker.
    text = journey.metrics(TP_NAME)
    assert metric_sum(text, "tandem_router_prefill_decisions_total", path="remote") == len(
        TP_QUESTIONS
    )
    assert metric_sum(text, "tandem_router_kv_transfer_bytes_total") > 0

    leader = _group_member(group, "0")["metadata"]["name"]
    log = journey.kubectl("logs", "-n", NS, leader).stdout
    assert "Ray group of 2 joined" in log and "tensor-parallel group of 2" in log
    # Its pool's EndpointSlice had no endpoints while the group started (null, which the
    # Kubernetes client's model refuses): the frontend's watch read it all the same.
    assert "watching EndpointSlices" not in _tp_frontend_log(journey)

    # Group faults under load: the follower's container killed, then the leader's.
    with journey.port_forward(
        journey.cluster, f"svc/{TP_NAME}-frontend", 8000, namespace=NS
    ) as port:
        base = f"http://127.0.0.1:{port}/v1"
        with SteadyLoad(base, key, long_prompts=False, model=TP_NAME) as load:
            load.wait_for(4)
            for worker_index, who in (("1", "follower"), ("0", "leader")):
                _kill_a_group_pod_under_load(journey, load, worker_index, who)
    # Client retries off, a 120 s deadline: none lost, none hung, none even failed.
    assert load.failures == [], load.failures
    FIGURES["ray_group_kills_requests_answered"] = load.ok
    journey.kubectl("delete", "ic", TP_NAME, "-n", NS, "--wait=true", timeout_s=300)
    eventually(
        lambda: not journey.get("pods", "-n", NS, "-l", f"tandem.dev/cluster={TP_NAME}")["items"],
        "the tensor-parallel cluster's pods to be gone",
    )


def _condition_of(journey: Journey, kind: str) -> Json:
    status = journey.get("ic", TP_NAME, "-n", NS).get("status") or {}
    found: Json = next(c for c in status.get("conditions", []) if c["type"] == kind)
    return found


def _tp_group(journey: Journey) -> list[Json]:
    items: list[Json] = journey.get(
        "pods", "-n", NS, "-l", f"leaderworkerset.sigs.k8s.io/name={TP_NAME}-prefill"
    )["items"]
    return items


def _group_member(group: list[Json], worker_index: str) -> Json:
    """The group's pod of that LeaderWorkerSet worker index ("0": the leader)."""
    member: Json = next(
        p for p in group
        if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == worker_index
    )  # fmt: skip
    return member


def _tp_frontend_log(journey: Journey, *options: str) -> str:
    return journey.kubectl(
        "logs", "-n", NS, "-l", f"tandem.dev/cluster={TP_NAME},tandem.dev/role=frontend", *options
    ).stdout  # fmt: skip


# What the frontend logs as it takes a worker out of its choices (router/health.py).
ROUTER_DROPS = ("marked unhealthy", "is not serving", "left the membership")


def _router_dropped(journey: Journey, address: str, since: datetime) -> datetime | None:
    """The time of the frontend's first log line since ``since`` that takes the worker at
    ``address`` out of its choices (the container runtime's timestamps: this clock)."""
    lines = _tp_frontend_log(journey, "--timestamps", f"--since-time={since.isoformat()}")
    for line in lines.splitlines():
        stamp, _, text = line.partition(" ")
        # RFC 3339 with up to 9 fraction digits (trailing zeros cut), which Python reads.
        at = datetime.fromisoformat(stamp)
        if at >= since and address in text and any(drop in text for drop in ROUTER_DROPS):
            return at
    return None


def _kill_a_group_pod_under_load(
    journey: Journey, load: SteadyLoad, worker_index: str, who: str
) -> None:
    """SIGKILL the container of one pod of the prefill group (as a crash or an OOM kill
    would end it): status names the group and why, the LeaderWorkerSet recreates both
    pods, and the group serves again; the load goes on on the decode worker meanwhile."""
    group = _tp_group(journey)
    uids = {p["metadata"]["uid"] for p in group}
    victim, leader = _group_member(group, worker_index), _group_member(group, "0")
    before = journey.metrics(TP_NAME)
    node = journey.cluster.real_node
    assert node is not None
    container = victim["status"]["containerStatuses"][0]["containerID"].removeprefix(
        "containerd://"
    )
    subprocess.run(
        ["ctr", "--address", str(node.containerd_socket), "-n", "k8s.io", "tasks", "kill",
         "-s", "SIGKILL", container],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    killed, killed_at = time.monotonic(), datetime.now(UTC)

    # The pod it names: the killed one, or its partner (a leader whose follower died
    # exits 1, "the engine is lost"), whichever the operator saw end first.
    def says_group_down() -> bool:
        degraded = _condition_of(journey, "Degraded")
        return degraded["reason"] == "GroupDown" and (
            f"group {TP_NAME}-prefill-0 is down: pod {TP_NAME}-prefill-0" in degraded["message"]
        )

    eventually(says_group_down, f"status to name the group whose {who} was killed")
    # When the router stopped sending the group new work: the frontend's first line, after
    # the kill, taking the group's worker (the leader's address) out of its choices.
    stopped: list[datetime] = []

    def router_dropped_it() -> bool:
        at = _router_dropped(journey, f"{leader['status']['podIP']}:", killed_at)
        stopped.extend([at] if at else [])
        return at is not None

    eventually(router_dropped_it, f"the frontend to stop routing to the group ({who} killed)")
    FIGURES[f"ray_group_{who}_kill_to_router_stopped_s"] = round(
        (stopped[0] - killed_at).total_seconds(), 2
    )

    def recreated_and_ready() -> bool:
        pods = _tp_group(journey)
        fresh = [p for p in pods if p["metadata"]["uid"] not in uids]
        whole = len(fresh) == 2 == len(pods) and all(_ready(p) for p in fresh)
        return whole and _condition_of(journey, "Ready")["status"] == "True"

    eventually(recreated_and_ready, f"the group recreated whole after its {who} was killed")
    FIGURES[f"ray_group_{who}_kill_to_ready_s"] = round(time.monotonic() - killed, 1)
    # Serving again: new prompts go to the recreated group.
    during = journey.metrics(TP_NAME)
    FIGURES[f"ray_group_{who}_kill_prefills_failed_over"] = metric_sum(
        during, "tandem_router_prefill_decisions_total", reason="prefill_failed"
    ) - metric_sum(before, "tandem_router_prefill_decisions_total", reason="prefill_failed")
    remote = metric_sum(during, "tandem_router_prefill_decisions_total", path="remote")
    eventually(
        lambda: metric_sum(
            journey.metrics(TP_NAME), "tandem_router_prefill_decisions_total", path="remote"
        ) > remote,
        f"a prompt prefilled by the recreated group (after its {who} was killed)",
    )  # fmt: skip
    load.wait_for(load.ok + 2)


# --------------------------------------------------------------------- planning


def render_planned_manifest() -> Json:
    """The CPU example under ``planning.mode: auto``, for an SLO and a workload this CPU
    meets by the step times measured with the committed SmolLM2 table
    (tests/data/perf-table-smollm2-cpu.json: a 512-token prompt prefills in ~1.7 s, a
    decode step takes ~0.1 s): 512-token prompts and 32-token answers at 0.3 req/s, TTFT
    p90 5 s, ITL p90 300 ms. One worker cannot keep up with that (its prefills stall
    the streams), so the plan has two or three workers for step times from 0.6x to 1.5x
    the committed ones; the short prompts the load then sends need one worker (two at
    1.5x): the re-plan really changes the shape, to fewer workers. Hand-written: one
    decode worker and no prefill pool, so profiling shares the node with one model
    loading; autoscaling off, so the pools are exactly the plan's."""
    doc: Json = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = NS
    spec = doc["spec"]
    spec["prefill"] |= {"replicas": 0, "minReplicas": 0, "maxReplicas": 2}
    spec["decode"] |= {"replicas": 1, "minReplicas": 1, "maxReplicas": 2}
    spec["slo"] = {"ttftP90Seconds": 5, "itlP90Seconds": 0.3}
    spec["workload"] = {"isl": 512, "osl": 32, "requestsPerSecond": {"max": 0.3}}
    spec["planning"] = {
        "mode": "auto",
        "replan": {"windowSeconds": 30, "minIntervalSeconds": 60},
    }
    return doc


def planned_workers(plan: Json, role: str) -> int:
    return int((plan.get(role) or {}).get("workers", 0))


def follows_plan(journey: Journey, plan: Json) -> bool:
    """Both pools at the plan's workers, each pod Ready and none left over (a pool the
    plan leaves out at zero)."""
    for role in ("prefill", "decode"):
        want = planned_workers(plan, role)
        if journey.pool_replicas(role) != want:
            return False
        pods = journey.pods(role)
        if len(pods) != want or not all(_ready(p) for p in pods) or journey.terminating(role):
            return False
    return True


def plan_status(journey: Journey) -> Json:
    status: Json = journey.get("ic", NAME, "-n", NS).get("status") or {}
    return status


def test_a_planned_cluster_is_profiled_on_the_node_then_deployed_as_planned(
    journey: Journey,
) -> None:
    """planning.mode auto on the reference engine: the profiling Job's pod runs
    ``tandem profile`` on the real kubelet and its table (the termination message) lands
    in ConfigMap reference-perf-table; the operator plans from it, the pools take the
    planned shape, the cluster is Ready and answers through port-forward."""
    started = time.monotonic()
    journey.kubectl("apply", "-f", "-", input=json.dumps(render_planned_manifest()))

    def profiled() -> bool:
        found = journey.kubectl("get", "configmap", f"{NAME}-perf-table", "-n", NS, check=False)
        return found.returncode == 0

    eventually(profiled, "the profiling Job's table", timeout_s=2 * WAIT_S)
    FIGURES["planned_profile_s"] = round(time.monotonic() - started, 1)
    table_map = journey.get("configmap", f"{NAME}-perf-table", "-n", NS)
    assert "tandem.dev/profile-failure" not in table_map["metadata"].get("annotations", {}), (
        table_map["metadata"]["annotations"]
    )
    table = json.loads(table_map["data"]["table.json"])
    assert table["format"] == "tandem.perf-table/v1" and table["worker"] is not None
    job = journey.get("job", f"{NAME}-profile", "-n", NS)
    assert any(c["type"] == "Complete" for c in job["status"]["conditions"])
    profilers = journey.get("pods", "-n", NS, "-l", f"job-name={NAME}-profile")["items"]
    assert [p["spec"]["nodeName"] for p in profilers] == [REAL_NODE_NAME]
    FIGURES["planned_profile_table"] = {"prefill": table["prefill"], "source": table["source"]}

    eventually(lambda: "shape" in plan_status(journey).get("plan", {}), "the plan")
    plan = plan_status(journey)["plan"]
    assert plan["outcome"] == "met", plan["message"]
    assert any("tandem profile" in source for source in plan["clockSources"]), plan
    workers = planned_workers(plan, "prefill") + planned_workers(plan, "decode")
    assert workers >= 2, plan["shape"]  # one worker cannot prefill 512-token prompts in time
    eventually(lambda: follows_plan(journey, plan), f"the pools to take {plan['shape']}")
    eventually(journey.ic_ready, "Ready at the planned shape")
    FIGURES["planned_first"] = plan["shape"]
    FIGURES["planned_ready_s"] = round(time.monotonic() - started, 1)
    with journey.frontend() as base_url:
        # The keys Secret is not the cluster's child: the deletion above left it, and the
        # new frontend mounts it from the start.
        reply = journey.client(base_url).chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert reply.choices[0].message.content


def test_the_served_workload_re_plans_and_rolls_without_failing_a_request(
    journey: Journey,
) -> None:
    """Short prompts and 8-token answers, far below the planned 512/32: one window (30 s)
    later the operator plans for what the frontend measured and rolls the new shape
    (fewer workers) while the load goes on, with zero failed requests."""
    first = plan_status(journey)["plan"]
    with journey.frontend() as base_url:
        load = SteadyLoad(
            base_url, journey.api_key, concurrency=1, max_tokens=8, long_prompts=False
        )
        with load:
            eventually(
                lambda: plan_status(journey).get("workload", {}).get("replans") == 1,
                "a re-plan from the observed workload",
            )
            eventually(
                lambda: (
                    plan_status(journey)["plan"]["specHash"] != first["specHash"]
                    and "shape" in plan_status(journey)["plan"]
                ),
                "the plan for the observed workload",
            )
            second = plan_status(journey)["plan"]
            eventually(
                lambda: follows_plan(journey, second), f"the pools to take {second['shape']}"
            )
            eventually(journey.ic_ready, "Ready at the new shape")
            load.wait_for(load.ok + 4)
    workload = plan_status(journey)["workload"]
    assert workload["planned"]["source"] == "observed"
    assert workload["planned"]["isl"] < 512 // 2, workload
    assert second["outcome"] == "met", second["message"]
    before = planned_workers(first, "prefill") + planned_workers(first, "decode")
    after = planned_workers(second, "prefill") + planned_workers(second, "decode")
    assert after < before, (first["shape"], second["shape"])
    assert load.failures == [], load.failures
    assert load.ok >= 4
    FIGURES["replan"] = {
        "first": first["shape"],
        "second": second["shape"],
        "observed": workload["observed"],
        "requests_answered": load.ok,
        "requests_failed": len(load.failures),
    }
