"""Start, attach to and stop a dev cluster: the I/O shell around the pure pieces."""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tandem.devcluster import dns, lws, processes
from tandem.devcluster.binaries import ClusterBinaries, find_kubectl, locate_binaries
from tandem.devcluster.components import Component, Ports, render_components, render_kwok_config
from tandem.devcluster.kubeconfig import (
    ADMIN_GROUP,
    ADMIN_USER,
    render_token_line,
    write_kubeconfig,
    write_private,
)
from tandem.devcluster.layout import StateLayout
from tandem.devcluster.nodes import NodeProfile, get_profile, render_profile
from tandem.devcluster.pki import (
    KubeletPki,
    Pki,
    create_kubelet_pki,
    create_pki,
    issue_serving_cert,
)
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.probes import http_status, wait_until
from tandem.devcluster.realnode import RealNode, RealNodeError
from tandem.devcluster.realnode.join import (
    NODE_GROUP,
    NODE_USER,
    join_real_node,
    plan_real_node,
    prepare_real_node,
)
from tandem.devcluster.state import ClusterState, load_state, save_state
from tandem.devcluster.storage import render_model_volume

logger = logging.getLogger(__name__)

FIELD_MANAGER = "tandem-devcluster"


class DevClusterError(RuntimeError):
    """Start-up or shutdown failed; the message carries the component log tails."""


class KubectlError(subprocess.CalledProcessError):
    """kubectl failed; unlike its base class, the message includes kubectl's stderr."""

    def __str__(self) -> str:
        stderr = self.stderr.strip() if isinstance(self.stderr, str) else ""
        return f"{super().__str__()}\n{stderr}" if stderr else super().__str__()


@dataclass(frozen=True, slots=True)
class StartOptions:
    state_dir: Path
    profile: str = "default"
    # Also write the kubeconfig here (the one in the state dir is always written).
    kubeconfig_path: Path | None = None
    # The LeaderWorkerSet CRDs and controller (tests/lws/build-lws.sh).
    with_lws: bool = False
    bin_dir: Path | None = None
    # Where build-lws.sh wrote its outputs; None: $TANDEM_LWS_BIN, else tests/lws/bin.
    lws_bin_dir: Path | None = None
    timeout_s: float = 180.0
    # The admin bearer token; a random one when None.
    token: str | None = None
    # Stop every component when the starting process dies (test sessions); off for
    # `tandem dev cluster up`, whose cluster outlives the command. A real node is then
    # torn down too (its supervisor sees this process's pipe close).
    tie_to_parent: bool = False
    # Profiles with a real node: the OCI archive of registry.k8s.io/pause:3.10, the
    # sandbox image (imported, never pulled); None builds it (tandem.devimages).
    pause_image: Path | None = None


@dataclass(frozen=True, slots=True)
class ProcessStatus:
    name: str
    pid: int
    running: bool
    rss_bytes: int


@dataclass(slots=True)
class DevCluster:
    """A running (or recorded) dev cluster and the helpers tests use against it."""

    layout: StateLayout
    state: ClusterState
    kubectl_path: Path
    # See StartOptions.tie_to_parent.
    tie_to_parent: bool = False
    # The real node (profiles such as ``real``), None when the cluster has none.
    real_node: RealNode | None = None
    # Popen handles of the processes this Python process started, so their exit status is
    # collected; empty when attached to a cluster started by another process.
    _children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return Path(self.state.kubeconfig)

    @property
    def api_url(self) -> str:
        return self.state.api_url

    @property
    def state_dir(self) -> Path:
        return self.layout.root

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raises KubectlError (a CalledProcessError whose
        message includes stderr) if ``check`` and it fails."""
        argv = [str(self.kubectl_path), f"--kubeconfig={self.layout.kubeconfig}", *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, output=result.stdout, stderr=result.stderr)
        return result

    def ready_node_count(self) -> int:
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        return sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            for conditions in (n.get("status", {}).get("conditions", []) for n in nodes)
        )

    def wait_crd_established(self, name: str, *, timeout_s: float = 60.0) -> None:
        """Poll until the CRD serves its API. (`kubectl wait --for=condition=Established`
        fails outright while a fresh CRD has no conditions yet.)"""
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'

        def established() -> bool:
            result = self.kubectl("get", "crd", name, "-o", f"jsonpath={jsonpath}", check=False)
            return result.returncode == 0 and result.stdout.strip() == "True"

        wait_until(established, timeout_s=timeout_s, what=f"CRD {name} Established")

    def describe(self) -> list[ProcessStatus]:
        return [
            ProcessStatus(
                name=p.name,
                pid=p.pid,
                running=processes.is_running(p),
                rss_bytes=processes.rss_bytes(p),
            )
            for p in self.state.processes
        ]

    def is_running(self) -> bool:
        return bool(self.state.processes) and all(s.running for s in self.describe())

    def rss_bytes(self) -> int:
        """Resident memory of the whole control plane (sum over its processes)."""
        return sum(s.rss_bytes for s in self.describe())

    def log_tails(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every component log, for failure reports."""
        logs = [(r.name, Path(r.log)) for r in self.state.processes]
        if self.real_node is not None:
            logs += self.real_node.log_files()
        parts = []
        for name, log in logs:
            try:
                text = log.read_text(errors="replace")
            except OSError as err:
                text = f"(cannot read log: {err})"
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"===== {name} ({log}) =====\n{tail}")
        return "\n".join(parts)

    def import_images(self, archives: Iterable[Path]) -> None:
        """Load OCI archives into the real node's containerd (see RealNode.import_images)."""
        if self.real_node is None:
            raise DevClusterError(f"the {self.state.profile!r} profile has no real node")
        self.real_node.import_images(archives)

    def stop(self) -> None:
        """Stop the real node (everything it made goes with it), then every component,
        newest first (kwok before the apiserver before etcd)."""
        errors = []
        if self.real_node is not None:
            try:
                self.real_node.stop()
            except RealNodeError as err:
                errors.append(str(err))
        for record in reversed(self.state.processes):
            try:
                processes.stop(record)
            except RuntimeError as err:
                errors.append(str(err))
            child = self._children.pop(record.name, None)
            if child is not None:
                child.poll()  # already reaped by processes.stop; settles the Popen handle
        if errors:
            raise DevClusterError("; ".join(errors))

    def restart(self, name: str, *, timeout_s: float = 120.0) -> None:
        """Stop component ``name`` (SIGTERM, then SIGKILL after the grace) and start it
        again with the same command line, as a node reboot or an upgrade would; returns
        once the API answers /readyz again. For fault tests (an API server restart
        during a reconcile)."""
        record = next(r for r in self.state.processes if r.name == name)
        argv = tuple(
            part.decode() for part in Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")
        )[:-1]  # the command line ends with a NUL
        processes.stop(record)
        child = self._children.pop(name, None)
        if child is not None:
            child.poll()
        order = [r.name for r in self.state.processes]
        others = tuple(r for r in self.state.processes if r.name != name)
        self.state = self.state.model_copy(update={"processes": others})
        self._launch(Component(name, argv, health_url=""))
        # Back in its place: stop() goes newest first (kwok before the apiserver).
        ordered = tuple(sorted(self.state.processes, key=lambda r: order.index(r.name)))
        self.state = self.state.model_copy(update={"processes": ordered})
        save_state(self.layout, self.state)
        wait_until(
            lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
            timeout_s=timeout_s,
            what=f"the API after restarting {name}",
            abort=lambda: self._exit_reason(name),
        )

    def _launch(self, component: Component) -> None:
        log_path = self.layout.log_file(component.name)
        child = processes.spawn(
            component.name, component.argv, log_path, tie_to_parent=self.tie_to_parent
        )
        self._children[component.name] = child
        record = processes.record_of(component.name, child, log_path)
        self.state = self.state.model_copy(update={"processes": (*self.state.processes, record)})
        save_state(self.layout, self.state)

    def _record_real_node(self, node: RealNode) -> None:
        self.real_node = node
        self.state = self.state.model_copy(update={"real_node": node.record})
        save_state(self.layout, self.state)

    def _node_json(self, name: str) -> str | None:
        result = self.kubectl("get", "node", name, "-o", "json", check=False)
        return result.stdout if result.returncode == 0 else None

    def _exit_reason(self, name: str) -> str | None:
        for record in self.state.processes:
            if record.name == name and not processes.is_running(record):
                return f"{name} exited; see {record.log}"
        return None


def open_cluster(state_dir: Path) -> DevCluster | None:
    """Attach to the cluster recorded in ``state_dir`` (running or not); None if none."""
    layout = StateLayout(state_dir.expanduser().resolve())
    state = load_state(layout)
    if state is None:
        return None
    kubectl = find_kubectl() or Path("kubectl")
    node = RealNode(state.real_node) if state.real_node is not None else None
    return DevCluster(layout=layout, state=state, kubectl_path=kubectl, real_node=node)


def stop_cluster(state_dir: Path) -> DevCluster | None:
    """Stop the cluster recorded in ``state_dir``; None if none was ever started there."""
    cluster = open_cluster(state_dir)
    if cluster is not None:
        cluster.stop()
    return cluster


def start_cluster(
    options: StartOptions, *, report: Callable[[str], None] = logger.info
) -> DevCluster:
    """Start a fresh cluster and return once it is usable: apiserver ready, the ``default``
    ServiceAccount created, every simulated node Ready (which proves kwok works).

    On any failure everything already started is stopped again; the logs stay in the
    state directory and their tails are in the raised DevClusterError.
    """
    began = time.monotonic()
    deadline = began + options.timeout_s
    layout = StateLayout(options.state_dir.expanduser().resolve())
    _refuse_if_running(layout)
    profile = get_profile(options.profile)
    bins = locate_binaries(options.bin_dir)
    lws_build = None
    if options.with_lws:
        try:
            lws_build = lws.locate_lws(options.lws_bin_dir)
        except lws.LwsBuildMissingError as err:
            raise DevClusterError(str(err)) from err
    pause_archive = coredns = None
    if profile.real_node:
        # Before anything starts: one line now instead of after the control plane.
        try:
            pause_archive = prepare_real_node(bins, options.pause_image)
            coredns = dns.locate_coredns()
        except (RealNodeError, dns.CoreDnsBuildMissingError) as err:
            raise DevClusterError(str(err)) from err

    _reset(layout)
    report(f"generating certificates and keys in {layout.pki_dir}")
    pki = create_pki(layout.pki_dir)
    kubelet_pki = create_kubelet_pki(layout.pki_dir) if profile.real_node else None
    token = options.token or secrets.token_urlsafe(32)
    node_token = secrets.token_urlsafe(32)
    lws_token = secrets.token_urlsafe(32)
    dns_token = secrets.token_urlsafe(32)
    tokens = render_token_line(token, ADMIN_USER, ADMIN_GROUP)
    tokens += render_token_line(node_token, NODE_USER, NODE_GROUP) * profile.real_node
    tokens += render_token_line(dns_token, dns.USER) * profile.real_node
    tokens += render_token_line(lws_token, lws.USER) * options.with_lws
    write_private(layout.token_file, tokens)
    # One call, so no port is handed out twice.
    chosen = allocate_ports(6 + 2 * options.with_lws)
    ports = Ports(*chosen[:6])
    lws_ports = lws.LwsPorts(*chosen[6:]) if options.with_lws else None
    write_kubeconfig(
        layout.kubeconfig, server=ports.api_url, ca_pem=pki.ca_cert.read_bytes(), token=token
    )
    layout.kwok_config.write_text(render_kwok_config(bins.kwok_stages.read_text()))
    visible_kubeconfig = options.kubeconfig_path or layout.kubeconfig
    state = ClusterState(
        api_url=ports.api_url,
        kubeconfig=str(visible_kubeconfig.expanduser().resolve()),
        profile=profile.name,
        with_lws=options.with_lws,
        started_at=time.time(),
    )
    save_state(layout, state)
    cluster = DevCluster(
        layout=layout,
        state=state,
        kubectl_path=bins.kubectl,
        tie_to_parent=options.tie_to_parent,
    )
    try:
        _bring_up(cluster, bins, pki, kubelet_pki, ports, token, profile, deadline, report)
        if lws_build is not None and lws_ports is not None:
            _start_lws(cluster, lws_build, pki, lws_ports, lws_token, deadline, report)
        if pause_archive is not None and kubelet_pki is not None and coredns is not None:
            apply = ("apply", "--server-side", f"--field-manager={FIELD_MANAGER}")
            rbac = {"apiVersion": "v1", "kind": "List", "items": dns.render_rbac()}
            cluster.kubectl(*apply, "-f", "-", input=json.dumps(rbac))
            plan = plan_real_node(
                root=layout.real_node_dir,
                kubelet=bins.path("kubelet"),
                api_url=ports.api_url,
                pki=pki,
                kubelet_pki=kubelet_pki,
                node_token=node_token,
                dns_token=dns_token,
                coredns=coredns,
                pause_archive=pause_archive,
            )
            report(f"starting the real node (kubelet + containerd; files in {plan.root})")
            join_real_node(
                plan,
                tie_to_parent=options.tie_to_parent,
                deadline=deadline,
                on_spawn=cluster._record_real_node,
                get_node_json=cluster._node_json,
            )
    except BaseException as err:
        # Includes KeyboardInterrupt: never leave half a control plane running.
        tails = cluster.log_tails()
        try:
            cluster.stop()
        except DevClusterError as stop_error:  # said after the start error, not instead
            tails = f"{tails}\nwhile stopping: {stop_error}"
        if not isinstance(err, Exception):
            raise
        raise DevClusterError(f"dev cluster failed to start: {err}\n{tails}") from err

    if options.kubeconfig_path is not None:
        write_private(options.kubeconfig_path.expanduser(), layout.kubeconfig.read_text())
    cluster.state = cluster.state.model_copy(update={"ready_after_s": time.monotonic() - began})
    save_state(layout, cluster.state)
    report(f"ready after {cluster.state.ready_after_s:.1f}s at {ports.api_url}")
    return cluster


def _bring_up(
    cluster: DevCluster,
    bins: ClusterBinaries,
    pki: Pki,
    kubelet_pki: KubeletPki | None,
    ports: Ports,
    token: str,
    profile: NodeProfile,
    deadline: float,
    report: Callable[[str], None],
) -> None:
    def remaining() -> float:
        return max(1.0, deadline - time.monotonic())

    def wait_healthy(component: Component, *, verify: bool) -> None:
        wait_until(
            lambda: (
                http_status(component.health_url, ca_cert=pki.ca_cert, token=token, verify=verify)
                == 200
            ),
            timeout_s=remaining(),
            what=f"{component.name} at {component.health_url}",
            abort=lambda: cluster._exit_reason(component.name),
        )

    etcd, apiserver, *controllers = render_components(bins, cluster.layout, pki, ports, kubelet_pki)
    for component in (etcd, apiserver):
        report(f"starting {component.name}")
        cluster._launch(component)
        wait_healthy(component, verify=True)
    # The controllers only need the apiserver; start them together, then wait for each.
    for component in controllers:
        report(f"starting {component.name}")
        cluster._launch(component)
    for component in controllers:
        wait_healthy(component, verify=False)

    # Pods are refused in a namespace until the controller manager created its
    # `default` ServiceAccount.
    report("waiting for the default ServiceAccount")
    wait_until(
        lambda: (
            http_status(
                f"{ports.api_url}/api/v1/namespaces/default/serviceaccounts/default",
                ca_cert=pki.ca_cert,
                token=token,
            )
            == 200
        ),
        timeout_s=remaining(),
        what="the default ServiceAccount",
        abort=lambda: cluster._exit_reason("kube-controller-manager"),
    )

    nodes = render_profile(profile)
    report(f"creating {len(nodes)} simulated nodes (profile {profile.name})")
    node_list = {"apiVersion": "v1", "kind": "List", "items": nodes}
    cluster.kubectl("create", "-f", "-", input=json.dumps(node_list))
    # kwok marks them Ready and keeps their leases fresh: this proves kwok works.
    wait_until(
        lambda: cluster.ready_node_count() == len(nodes),
        timeout_s=remaining(),
        what=f"{len(nodes)} Ready nodes",
        abort=lambda: cluster._exit_reason("kwok"),
    )

    report("creating the simulated volume for the PVC inference/models")
    cluster.kubectl("create", "-f", "-", input=json.dumps(render_model_volume()))


def _start_lws(
    cluster: DevCluster,
    build: lws.LwsBuild,
    pki: Pki,
    ports: lws.LwsPorts,
    token: str,
    deadline: float,
    report: Callable[[str], None],
) -> None:
    """The LeaderWorkerSet CRDs, the controller's identity and RBAC, the controller, then
    the webhook configurations that make the API server call it (see tandem.devcluster.lws)."""

    def remaining() -> float:
        return max(1.0, deadline - time.monotonic())

    apply = ("apply", "--server-side", f"--field-manager={FIELD_MANAGER}")

    def apply_objects(objects: list[dict[str, object]]) -> None:
        documents = {"apiVersion": "v1", "kind": "List", "items": objects}
        cluster.kubectl(*apply, "-f", "-", input=json.dumps(documents))

    report("installing the LeaderWorkerSet CRDs")
    cluster.kubectl(*apply, *(f"--filename={path}" for path in build.crds.values()))
    for name in build.crds:
        cluster.wait_crd_established(name, timeout_s=remaining())

    directory = cluster.layout.lws_dir
    cert_dir = directory / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    # controller-runtime's webhook server reads tls.crt and tls.key from its certDir.
    subject = f"/CN={lws.CONTROLLER}"
    issue_serving_cert(cluster.layout.pki_dir, subject, cert_dir / "tls.crt", cert_dir / "tls.key")
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(
        kubeconfig, server=cluster.api_url, ca_pem=pki.ca_cert.read_bytes(), token=token
    )
    config = directory / "config.yaml"
    config.write_text(lws.render_controller_config(ports, cert_dir))
    role = lws.render_role(yaml.safe_load(build.role.read_text()))
    apply_objects([role, lws.render_role_binding(role)])

    controller = lws.render_controller(build, config, kubeconfig, ports)
    report(f"starting {controller.name}")
    cluster._launch(controller)
    wait_until(
        lambda: http_status(controller.health_url) == 200,
        timeout_s=remaining(),
        what=f"{controller.name} at {controller.health_url}",
        abort=lambda: cluster._exit_reason(controller.name),
    )
    patches = {kind: path.read_text() for kind, path in build.webhook_patches.items()}
    webhooks = lws.render_webhook_configurations(
        build.webhooks.read_text(), patches, url=ports.webhook_url, ca_pem=pki.ca_cert.read_bytes()
    )
    apply_objects(webhooks)
    # The manager serves the webhooks as it starts, but registers their handlers a moment
    # later: until then the first LeaderWorkerSet would be refused with a 404. (These GETs
    # are answered 400, "request body is empty", which the controller logs as errors.)
    paths = [urlsplit(w["clientConfig"]["url"]).path for c in webhooks for w in c["webhooks"]]
    wait_until(
        lambda: all(
            http_status(f"{ports.webhook_url}{path}", ca_cert=pki.ca_cert) not in (None, 404)
            for path in paths
        ),
        timeout_s=remaining(),
        what=f"{controller.name}'s webhooks",
        abort=lambda: cluster._exit_reason(controller.name),
    )


def _refuse_if_running(layout: StateLayout) -> None:
    try:
        state = load_state(layout)
    except ValueError:
        return  # an unreadable state file cannot describe anything we could stop
    supervisor = () if state is None or state.real_node is None else (state.real_node.supervisor,)
    if state is not None and any(processes.is_running(p) for p in (*state.processes, *supervisor)):
        raise DevClusterError(
            f"a dev cluster is already running from {layout.root}; "
            "stop it first (`tandem dev cluster down`)"
        )


def _reset(layout: StateLayout) -> None:
    """Remove what a previous run left, but only the entries this layout owns."""
    layout.root.mkdir(parents=True, exist_ok=True)
    for entry in layout.owned_entries():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
