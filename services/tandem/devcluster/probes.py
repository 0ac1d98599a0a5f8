"""Readiness probes with deadlines. Only ever used against 127.0.0.1."""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

_POLL_INTERVAL_S = 0.2


class ProbeTimeoutError(TimeoutError):
    """A condition did not hold before its deadline."""


def wait_until(
    check: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    abort: Callable[[], str | None] = lambda: None,
) -> None:
    """Poll ``check`` until it returns True or ``timeout_s`` passes.

    ``abort`` is asked on every round and returns a reason to give up early (for example
    "kube-apiserver exited"), so a crashed component fails fast instead of at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return
        reason = abort()
        if reason is not None:
            raise RuntimeError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() >= deadline:
            raise ProbeTimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(_POLL_INTERVAL_S)


def http_status(
    url: str,
    *,
    ca_cert: Path | None = None,
    token: str | None = None,
    verify: bool = True,
    timeout_s: float = 2.0,
) -> int | None:
    """The HTTP status of a GET to a loopback ``url``; None when nothing answers yet."""
    host = urlsplit(url).hostname
    if host not in ("127.0.0.1", "localhost"):
        # The cluster's pod and node addresses are fake; refuse anything off-host.
        raise ValueError(f"refusing to probe non-loopback URL {url}")
    context: ssl.SSLContext | None = None
    if url.startswith("https:"):
        if verify:
            context = ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
        else:
            # Controller manager and scheduler serve a self-signed cert made in memory.
            context = ssl._create_unverified_context()
    # No proxies: an http_proxy in the environment must never see cluster traffic.
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, http.client.HTTPException, OSError):
        return None
