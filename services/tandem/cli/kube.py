"""A Kubernetes API client for the commands that talk to a cluster (``tandem keys``,
``tandem crds apply``), from a kubeconfig as kubectl would pick it."""

from __future__ import annotations

import os
from typing import Any

from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio import config as kube_config


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
