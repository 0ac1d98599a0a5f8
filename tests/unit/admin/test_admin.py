"""The admin socket: /drain for the preStop hook, reachable only through a Unix socket."""

from __future__ import annotations

import asyncio
import stat
import subprocess
import sys
from pathlib import Path

from tandem.admin import bind_unix, create_admin_app, create_embedded_server


def drain_cli(socket_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tandem.admin", "drain", "--socket", str(socket_path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_hook_drains_through_the_socket_and_waits_for_the_answer(
    tmp_path: Path,
) -> None:
    asked: list[float] = []

    async def drain(grace_s: float) -> int:
        asked.append(grace_s)
        return 2

    path = tmp_path / "admin.sock"
    sock = bind_unix(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # only the pod's own user
    server = create_embedded_server(create_admin_app(drain, default_grace_s=600, max_grace_s=30))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn exposes no event
            await asyncio.sleep(0.01)
        done = await asyncio.to_thread(drain_cli, path, "--grace-seconds", "45")
        default = await asyncio.to_thread(drain_cli, path)
        refused = await asyncio.to_thread(drain_cli, path, "--grace-seconds", "-1")
    finally:
        server.should_exit = True
        await serving
    assert done.returncode == 0 and done.stdout == "drained (2 request(s) still in flight)\n"
    assert default.returncode == 0
    assert asked == [30.0, 30.0]  # capped at the process's maximum
    assert refused.returncode == 1
    assert "answered 400" in refused.stderr and "must not be negative" in refused.stderr


def test_no_socket_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = drain_cli(tmp_path / "absent.sock")
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: cannot drain through {tmp_path / 'absent.sock'}: ")
    assert len(result.stderr.strip().splitlines()) == 1
