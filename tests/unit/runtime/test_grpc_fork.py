"""A process of ours that uses gRPC can fork to exec while gRPC is busy in other threads:
the supervisor starts workers this way (``preexec_fn``, so a real fork) while its drainer
and the tests' clients hold channels."""

from __future__ import annotations

import os
import subprocess
import sys

# Two threads keep gRPC's core busy (calls to a closed port) while the main thread starts
# 200 children the supervisor's way. grpcio's default fork handlers log each fork they
# skip or break ("skipping fork() handlers", "epoll_wait error: Bad file descriptor").
FORKS_WHILE_BUSY = """
import subprocess, threading
import tandem
import grpc
from tandem.devcluster.processes import die_with_parent

channel = grpc.insecure_channel("127.0.0.1:1")
call = channel.unary_unary("/none.None/None")
done = threading.Event()

def busy():
    while not done.is_set():
        try:
            call(b"", timeout=0.01)
        except grpc.RpcError:
            pass

threads = [threading.Thread(target=busy) for _ in range(2)]
for t in threads:
    t.start()
for _ in range(200):
    subprocess.Popen(["true"], close_fds=True, preexec_fn=die_with_parent).wait()
done.set()
for t in threads:
    t.join()
print("forked 200")
"""


def test_forks_while_grpc_is_busy_leave_grpc_alone() -> None:
    # Without the switch this test process inherited from importing tandem: the child's
    # own import must set it.
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    run = subprocess.run(
        [sys.executable, "-c", FORKS_WHILE_BUSY],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert (run.returncode, run.stdout) == (0, "forked 200\n"), run.stderr[-2000:]
    assert run.stderr == ""
