"""/healthz, /readyz and /metrics of the operator."""

from __future__ import annotations

import aiohttp

from tandem.devcluster.ports import allocate_ports
from tandem_operator.kube.health import HealthState, start_server


async def fetch(port: int, path: str) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def test_probes_follow_the_state() -> None:
    clock = {"now": 100.0, "activity": 100.0, "leader": False, "synced": False, "blocked": True}
    state = HealthState(
        last_activity=lambda: clock["activity"],
        stale_after_seconds=60,
        is_leader=lambda: bool(clock["leader"]),
        synced=lambda: bool(clock["synced"]),
        blocked=lambda: bool(clock["blocked"]),
        monotonic=lambda: clock["now"],
    )
    (port,) = allocate_ports(1)
    runner = await start_server(state, "127.0.0.1", port)
    try:
        assert (await fetch(port, "/healthz"))[0] == 200
        # Waiting for the Lease namespace to exist: alive, but nobody can lead.
        assert (await fetch(port, "/readyz"))[0] == 503
        clock["blocked"] = False
        assert (await fetch(port, "/readyz"))[0] == 200  # a standby is ready
        clock["leader"] = True
        assert (await fetch(port, "/readyz"))[0] == 503  # a leader must sync its caches first
        clock["synced"] = True
        assert (await fetch(port, "/readyz"))[0] == 200
        clock["now"] = 161.0  # the election loop went silent for over a minute
        assert (await fetch(port, "/healthz"))[0] == 503
        status, body = await fetch(port, "/metrics")
        assert status == 200
        assert "tandem_operator_queue_depth" in body
        assert "tandem_operator_reconcile_duration_seconds_bucket" in body
    finally:
        await runner.cleanup()
