"""A LeaderWorkerSet group's Ray cluster on this machine: the leader and follower of
``tandem.worker.ray_launch`` as processes, each "pod" an address of its own on loopback,
with token authentication on. For the integration test and the tensor-parallel bench.

Ray swaps 127.0.0.1 for the machine's outside address when it dials, so the pods are
127.0.0.2 (leader) and 127.0.0.3 (follower): every byte stays on ``lo``. The head's
daemons detach from the launcher (in a pod they end with the container); ``stop`` ends
every process this group started: those with its ``RAY_TMPDIR``, or a file open under it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

LEADER_IP, FOLLOWER_IP = "127.0.0.2", "127.0.0.3"
# Ray's ports of the two "pods", 200 each (RayPorts): a block nothing else listens on.
PORTS_NEEDED = 400


class LocalRayGroup:
    def __init__(self, size: int = 2) -> None:
        if size != 2:
            raise ValueError("one leader and one follower: 127.0.0.2 and 127.0.0.3")
        # Ray's sockets live under RAY_TMPDIR: a short path (AF_UNIX paths are short).
        self.root = Path(tempfile.mkdtemp(prefix="tr", dir="/tmp"))
        token = self.root / "token"
        token.write_text(secrets.token_hex(32))
        self.env = {
            **os.environ,
            "RAY_TMPDIR": str(self.root),
            "RAY_AUTH_TOKEN_PATH": str(token),
            "POD_IP": LEADER_IP,
            "LWS_LEADER_ADDRESS": LEADER_IP,
            "LWS_GROUP_SIZE": str(size),
        }
        self.first = _free_block()
        self.follower: subprocess.Popen[bytes] | None = None

    def start_follower(self, log: Path) -> None:
        with log.open("wb") as out:
            self.follower = subprocess.Popen(
                [
                    sys.executable, "-m", "tandem.worker.ray_launch", "follower",
                    f"--ports-from={self.first + 200}", f"--leader-gcs-port={self.first}",
                ],
                stdout=out, stderr=subprocess.STDOUT, env={**self.env, "POD_IP": FOLLOWER_IP},
            )  # fmt: skip

    def leader_launcher(self) -> list[str]:
        """The command that starts the head, waits for the follower, then execs what
        follows it."""
        return [
            sys.executable, "-m", "tandem.worker.ray_launch", "leader",
            f"--ports-from={self.first}", "--join-timeout-s=120", "--",
        ]  # fmt: skip

    @property
    def rank_port(self) -> int:
        """Where the leader's worker finds its follower rank (RayPorts.rank_link)."""
        return self.first + 8

    def kill_follower(self) -> int:
        """SIGKILL every process of the follower "pod" (its Ray node and the rank it
        hosts), as a node failure would; returns how many."""
        killed = 0
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                env = proc.environ()
                if env.get("RAY_TMPDIR") == str(self.root) and env.get("POD_IP") == FOLLOWER_IP:
                    proc.kill()
                    killed += 1
        return killed

    def stop(self) -> None:
        if self.follower is not None and self.follower.poll() is None:
            self.follower.send_signal(signal.SIGTERM)  # `ray start --block` stops its node
            try:
                self.follower.wait(30)
            except subprocess.TimeoutExpired:
                self.follower.kill()
        deadline = time.monotonic() + 30
        while (ours := [p for p in psutil.process_iter() if self._started(p)]) and (
            time.monotonic() < deadline
        ):
            for proc in ours:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            time.sleep(0.5)
        shutil.rmtree(self.root, ignore_errors=True)
        if ours:
            raise RuntimeError(f"Ray processes left running: {[p.pid for p in ours]}")

    def _started(self, proc: psutil.Process) -> bool:
        root = str(self.root)
        try:
            if proc.environ().get("RAY_TMPDIR") == root:
                return True
            return any(f.path.startswith(root) for f in proc.open_files())
        except psutil.Error:  # gone meanwhile, or not ours to read
            return False


def _free_block() -> int:
    """The first port of PORTS_NEEDED that nothing listens on, at 21000 or above."""
    listening = [c.laddr for c in psutil.net_connections("tcp") if c.status == "LISTEN"]
    taken = {address.port for address in listening if address}
    for first in range(21000, 60000, 1000):
        if not taken & set(range(first, first + PORTS_NEEDED)):
            return first
    raise RuntimeError(f"no {PORTS_NEEDED} free ports in a row")
