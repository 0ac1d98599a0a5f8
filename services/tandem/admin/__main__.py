"""``python -m tandem.admin drain --socket PATH [--grace-seconds N]``: the preStop hook.

Asks the process listening on the admin socket to drain and waits for its answer; exits
0 once it answered (whatever was left in flight is printed), 1 if it could not be asked.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlencode

# Kubernetes ends the hook at the pod's termination grace period anyway.
REQUEST_TIMEOUT_S = 3600.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        self.sock = sock


def request_drain(path: Path, grace_s: float | None, timeout_s: float = REQUEST_TIMEOUT_S) -> int:
    """POST /drain on the admin socket at ``path``; returns what was still in flight."""
    query = "" if grace_s is None else "?" + urlencode({"grace_seconds": grace_s})
    conn = _UnixConnection(path, timeout_s)
    try:
        conn.request("POST", "/drain" + query)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise OSError(f"{path} answered {response.status}: {body[:200].decode(errors='replace')}")
    return int(json.loads(body)["in_flight"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem.admin")
    sub = parser.add_subparsers(dest="command", required=True)
    drain = sub.add_parser("drain", help="drain the worker or frontend of this pod")
    drain.add_argument("--socket", type=Path, required=True, help="its admin socket")
    drain.add_argument("--grace-seconds", type=float, help="default: the process's own")
    args = parser.parse_args(argv)
    try:
        left = request_drain(args.socket, args.grace_seconds)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot drain through {args.socket}: {exc}", file=sys.stderr)
        return 1
    print(f"drained ({left} request(s) still in flight)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
