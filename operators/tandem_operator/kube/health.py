"""``/metrics``, ``/healthz`` and ``/readyz`` on one small aiohttp server."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

# Importing the module registers the operator's metrics, so /metrics lists them from the
# first scrape (zeros included) rather than only after their first use.
from tandem_operator import metrics as _registered  # noqa: F401


@dataclass
class HealthState:
    """What the probes look at; the manager keeps it current."""

    # When the leader-election loop last ran a round (monotonic seconds).
    last_activity: Callable[[], float] = time.monotonic
    # A loop silent for longer than this is stuck: /healthz fails and the pod restarts.
    stale_after_seconds: float = 60.0
    is_leader: Callable[[], bool] = lambda: False
    synced: Callable[[], bool] = lambda: False
    # Something the operator waits for that nobody can lead without (the Lease namespace).
    blocked: Callable[[], bool] = lambda: False
    monotonic: Callable[[], float] = field(default=time.monotonic)

    def healthy(self) -> bool:
        return self.monotonic() - self.last_activity() < self.stale_after_seconds

    def ready(self) -> bool:
        # A standby replica is ready (it will take over); a leader once its caches synced.
        if not self.healthy() or self.blocked():
            return False
        return not self.is_leader() or self.synced()


def build_app(state: HealthState) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        ok = state.healthy()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "stalled\n")

    async def readyz(_: web.Request) -> web.Response:
        ok = state.ready()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "not ready\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_server(state: HealthState, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(build_app(state), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
