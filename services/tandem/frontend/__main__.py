"""``python -m tandem.frontend --config FILE [--host H] [--port P] [--credentials DIR]
[--admin-socket PATH]``.

``--credentials``: the cluster's CA bundle and member certificate; every call to a
worker is then mutual TLS (without it, plaintext: workers accept that on loopback only).
``--admin-socket``: a Unix socket serving ``/drain`` for the preStop hook.

Without API keys in the document (``apiKeys``) the frontend serves only on a loopback
address: on any other it refuses to start, unless the document says
``apiKeys: {required: false}`` (a cluster behind an authenticating gateway).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tandem.frontend.app import create_frontend_admin_app
from tandem.frontend.config import load_frontend_config
from tandem.frontend.server import build_frontend, frontend_tokenizer, serve
from tandem.router.kv_index import KvIndex
from tandem.router.ports import WorkerClient as RouterWorkerClient
from tandem.security import CredentialStore
from tandem.telemetry.tracing import configure_tracing
from tandem.worker.client import WorkerClient


def main(
    argv: Sequence[str] | None = None,
    *,
    wrap_client: Callable[[RouterWorkerClient], RouterWorkerClient] | None = None,
    index: KvIndex | None = None,
) -> int:
    """Serve the frontend; ``wrap_client`` and ``index`` let a benchmark's baseline
    (``tandem_dev.bench.router_memory``) run the same program around its own index."""
    parser = argparse.ArgumentParser(prog="python -m tandem.frontend")
    parser.add_argument("--config", required=True, type=Path, help="frontend document")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--credentials", type=Path, help="the cluster's credentials directory")
    parser.add_argument("--admin-socket", type=Path, help="Unix socket serving /drain")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    configure_tracing("tandem-frontend")
    try:
        config = load_frontend_config(args.config)
        tokenizer = frontend_tokenizer(config)
        credentials = CredentialStore(args.credentials) if args.credentials else None
    except (OSError, ValueError) as exc:  # incl. a missing model file or tokenizer package
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.api_keys is None and not _is_loopback(args.host):
        print(
            f"error: refusing to serve without API keys on {args.host}: anyone who reaches "
            "it could use it. Give the document apiKeys (key Secrets), or "
            "apiKeys: {required: false} to serve keyless on purpose",
            file=sys.stderr,
        )
        return 2
    if config.api_keys is not None and not config.api_keys.required:
        logging.getLogger(__name__).warning(
            "serving without API keys (apiKeys.required is false): anyone who reaches "
            "%s:%d may use it",
            args.host,
            args.port,
        )

    def connect(address: str) -> RouterWorkerClient:
        client = WorkerClient(address, credentials=credentials)
        return client if wrap_client is None else wrap_client(client)

    app, router = build_frontend(
        config, connect, tokenizer=tokenizer, index=index, credentials=credentials
    )
    admin = (create_frontend_admin_app(router), args.admin_socket) if args.admin_socket else None
    metrics = (app.state.metrics_app, config.metrics_port) if config.metrics_port else None
    try:
        asyncio.run(serve(app, args.host, args.port, admin=admin, metrics=metrics))
    except KeyboardInterrupt:
        return 130
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: not provably loopback
        return False


if __name__ == "__main__":
    sys.exit(main())
