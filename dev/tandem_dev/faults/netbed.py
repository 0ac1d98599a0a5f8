"""Network namespaces on a private bridge, for faults between processes of one machine.

Every host gets its own namespace with one veth leg on a bridge that lives only in this
machine's root namespace, on a /24 inside 10.213.0.0/16 that no route leads out of: the
namespaces have no default route, so nothing they send can leave the machine. Faults act
inside those namespaces only: a partition is a pair of iptables DROP rules in one host's
namespace, a slow link a ``tc`` qdisc on its veth.

Names carry the owner's pid (``tandem-fault-<pid>-<n>-<host>``, bridge ``tfb<pid hex><n>``), so a
run killed before its cleanup is swept by the next one. This kernel has no ``netem``
(CONFIG_NET_SCH_NETEM is unset on these machines): the slow link is a token bucket
(``tbf``), which limits the rate, the quantity a KV transfer feels, but adds no delay.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

PREFIX = "tandem-fault-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-")
_FIRST_OCTET, _LAST_OCTET = 64, 127  # 10.213.7.0/24 belongs to the real test node
_SEQUENCE = itertools.count()
SEND_BUFFER = "net.ipv4.tcp_wmem=4096 16384 65536"  # inside each host's namespace


class NetBedError(RuntimeError):
    """A command that builds or changes the bed failed (its stderr is in the message)."""


@dataclass(frozen=True, slots=True)
class Host:
    name: str  # e.g. "prefill-0"
    namespace: str
    veth: str  # the root-namespace leg (the other is eth0 inside the namespace)
    address: str


@dataclass(frozen=True, slots=True)
class NetPlan:
    owner: int
    bridge: str
    gateway: str  # the bridge's address: how the root namespace reaches the hosts
    prefix_len: int
    hosts: tuple[Host, ...]

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)


def plan_bed(owner: int, seq: int, octet: int, names: Sequence[str]) -> NetPlan:
    """Bed number ``seq`` of process ``owner`` for hosts ``names`` on 10.213.<octet>.0/24
    (pure)."""
    if not _FIRST_OCTET <= octet <= _LAST_OCTET:
        raise ValueError(f"octet {octet} outside {_FIRST_OCTET}..{_LAST_OCTET}")
    base = f"10.213.{octet}"
    tag = f"{owner:x}{seq % 16:x}"
    hosts = tuple(
        Host(name, f"{PREFIX}{owner}-{seq}-{name}", f"tfv{tag}-{i}", f"{base}.{10 + i}")
        for i, name in enumerate(names)
    )
    if any(len(h.veth) > 15 for h in hosts):
        raise ValueError("interface names longer than 15 characters")
    return NetPlan(owner, f"tfb{tag}", f"{base}.1", 24, hosts)


def setup_commands(plan: NetPlan) -> list[list[str]]:
    """``ip`` commands that build ``plan``, in order (pure)."""
    cidr = f"/{plan.prefix_len}"
    cmds = [
        ["ip", "link", "add", plan.bridge, "type", "bridge"],
        ["ip", "addr", "add", plan.gateway + cidr, "dev", plan.bridge],
        ["ip", "link", "set", plan.bridge, "up"],
    ]
    for h in plan.hosts:
        inner = h.veth + "n"
        cmds += [
            ["ip", "netns", "add", h.namespace],
            ["ip", "link", "add", h.veth, "type", "veth", "peer", "name", inner],
            ["ip", "link", "set", inner, "netns", h.namespace],
            ["ip", "link", "set", h.veth, "master", plan.bridge],
            ["ip", "link", "set", h.veth, "up"],
            ["ip", "-n", h.namespace, "link", "set", inner, "name", "eth0"],
            ["ip", "-n", h.namespace, "addr", "add", h.address + cidr, "dev", "eth0"],
            ["ip", "-n", h.namespace, "link", "set", "eth0", "up"],
            ["ip", "-n", h.namespace, "link", "set", "lo", "up"],
            # KV in production (hundreds of MB) dwarfs socket buffers; a test-sized KV
            # (under 1 MB) would otherwise sit whole in the kernel, which delivers it
            # even after the sender was killed. Capped in this namespace only.
            [
                "ip",
                "netns",
                "exec",
                h.namespace,
                "sysctl",
                "-qw",
                SEND_BUFFER,
            ],
        ]
    return cmds


def partition_rules(plan: NetPlan, a: str, b: str) -> list[list[str]]:
    """iptables rules (without the -I/-D verb) inside ``a``'s namespace that drop every
    packet between hosts ``a`` and ``b`` (pure)."""
    peer = plan.host(b).address
    return [["INPUT", "-s", peer, "-j", "DROP"], ["OUTPUT", "-d", peer, "-j", "DROP"]]


def shape_command(plan: NetPlan, host: str, rate_kbit: int) -> list[str]:
    """A token bucket on ``host``'s egress: everything it sends leaves at ``rate_kbit``
    (pure). Burst and queue are sized for a few packets, so the rate holds at once."""
    return ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{rate_kbit}kbit",
            "burst", "16kb", "latency", "2s"]  # fmt: skip


def _run(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NetBedError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove namespaces and bridges left by fault runs whose process is gone; returns
    what was removed."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    removed: list[str] = []
    owners: set[int] = set()
    for line in listing.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAME.match(name)
        if match and not _alive(int(match.group(1))):
            owners.add(int(match.group(1)))
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
            removed.append(name)
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=False)
    for owner in owners:
        for bridge in re.findall(rf"^(tfb{owner:x}[0-9a-f])\b", links.stdout, re.MULTILINE):
            subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)
            removed.append(bridge)
    return removed


def _free_octet(owner: int) -> int:
    routes = subprocess.run(
        ["ip", "-4", "route", "show"], capture_output=True, text=True, check=False
    ).stdout
    used = set(re.findall(r"^10\.213\.(\d+)\.", routes, flags=re.MULTILINE))
    span = _LAST_OCTET - _FIRST_OCTET + 1
    for step in range(span):
        octet = _FIRST_OCTET + (owner + step) % span
        if str(octet) not in used:
            return octet
    raise NetBedError("no free /24 in 10.213.64.0-10.213.127.255 for the fault bed")


@dataclass
class NetBed:
    """A built bed; ``close`` removes everything it made (also after a failed build)."""

    plan: NetPlan
    _made: list[tuple[str, str]] = field(default_factory=list)  # ("netns"|"link", name)
    _rules: list[tuple[str, list[str]]] = field(default_factory=list)  # (namespace, rule)

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace (``ip netns exec`` keeps the pid)."""
        return ["ip", "netns", "exec", self.plan.host(host).namespace, *argv]

    def partition(self, a: str, b: str) -> None:
        namespace = self.plan.host(a).namespace
        for rule in partition_rules(self.plan, a, b):
            _run(["ip", "netns", "exec", namespace, "iptables", "-w", "-I", *rule])
            self._rules.append((namespace, rule))

    def heal(self) -> None:
        """Remove every partition rule (the namespaces' own tables: nothing else)."""
        while self._rules:
            namespace, rule = self._rules.pop()
            _run(["ip", "netns", "exec", namespace, "iptables", "-w", "-D", *rule])

    def shape(self, host: str, rate_kbit: int) -> None:
        _run(self.exec_argv(host, shape_command(self.plan, host, rate_kbit)))

    def unshape(self, host: str) -> None:
        _run(self.exec_argv(host, ["tc", "qdisc", "del", "dev", "eth0", "root"]))

    def close(self) -> None:
        errors = []
        for kind, name in reversed(self._made):
            argv = ["ip", kind, "delete", name]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            # A veth goes with its namespace: already gone is fine.
            if done.returncode != 0 and not re.search("No such|Cannot find", done.stderr):
                errors.append(done.stderr.strip())
        self._made.clear()
        self._rules.clear()  # they lived in the namespaces just deleted
        if errors:
            raise NetBedError("; ".join(errors))


@contextlib.contextmanager
def net_bed(names: Sequence[str]) -> Iterator[NetBed]:
    """Build a bed for hosts ``names`` (root needed); removed on exit, even on failure."""
    if os.geteuid() != 0:
        raise NetBedError("the fault bed needs root (network namespaces, a bridge, iptables)")
    sweep_stale()
    owner = os.getpid()
    bed = NetBed(plan_bed(owner, next(_SEQUENCE), _free_octet(owner), names))
    try:
        for argv in setup_commands(bed.plan):
            _run(argv)
            if argv[:3] == ["ip", "link", "add"]:  # the bridge, a veth pair
                bed._made.append(("link", argv[3]))
            elif argv[:3] == ["ip", "netns", "add"]:
                bed._made.append(("netns", argv[3]))
        yield bed
    finally:
        bed.close()
