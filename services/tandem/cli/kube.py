"""A Kubernetes API client for the commands that talk to a cluster (``tandem keys``,
``tandem crds apply``), from a kubeconfig as kubectl would pick it."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client.exceptions import ApiException

EXIT_FAILED = 1


def kubeconfig_path(given: str | None) -> str:
    # Read $KUBECONFIG now: kubernetes_asyncio's default is fixed at import time.
    return given or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


async def api_client(path: str, context: str | None) -> tuple[Any, str]:
    """The client and the context's namespace ("default" when it names none)."""
    cfg = kube_client.Configuration()
    await kube_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    contexts, current = kube_config.list_kube_config_contexts(config_file=path)
    chosen = next((c for c in contexts if c["name"] == context), current) if context else current
    namespace = (chosen or {}).get("context", {}).get("namespace") or "default"
    return kube_client.ApiClient(configuration=cfg), namespace


def run_against_cluster(
    kubeconfig: str | None,
    context: str | None,
    work: Callable[[Any, str], Awaitable[int]],
    *,
    failing_to: str,
) -> int:
    """``work(api, namespace)`` against the cluster the kubeconfig names; its exit code,
    or EXIT_FAILED with one line on stderr for what a user can act on (no kubeconfig, an
    API answer, an unreachable server, ``failing_to`` saying what could not be done)."""
    path = kubeconfig_path(kubeconfig)
    if not os.path.exists(path):
        print(f"error: no kubeconfig at {path} (set KUBECONFIG or --kubeconfig)", file=sys.stderr)
        return EXIT_FAILED

    async def main() -> int:
        api, namespace = await api_client(path, context)
        async with api:
            return await work(api, namespace)

    try:
        return asyncio.run(main())
    except ApiException as exc:
        print(f"error: the Kubernetes API answered {exc.status} {exc.reason}", file=sys.stderr)
    except (OSError, TimeoutError, kube_config.ConfigException) as exc:
        print(f"error: {failing_to}: {exc}", file=sys.stderr)
    return EXIT_FAILED
