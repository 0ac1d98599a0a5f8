"""``tandem keys add|list|revoke CLUSTER``: the API keys of an InferenceCluster.

Keys live hashed in the Secret ``<cluster>-api-keys`` (``tandem.frontend.api_keys``),
one item per key, which every frontend of the cluster mounts and re-reads: a key added
or revoked here works, or stops working, within about a minute (the kubelet's refresh of
mounted Secrets), without a restart. ``add`` prints the key once, on stdout alone, so
``export OPENAI_API_KEY=$(tandem keys add ...)`` works; nothing can show it again.
Rotation: add a new key, move the clients to it, revoke the old one.

Every write is a read-modify-replace guarded by the Secret's resourceVersion, so two
admins adding keys at once cannot lose one.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio.client.exceptions import ApiException

from tandem.api.v1alpha1 import GROUP, VERSION
from tandem.cli.kube import EXIT_FAILED, run_against_cluster
from tandem.frontend.api_keys import (
    TENANT,
    KeyRecord,
    check_name,
    dump_record,
    new_key,
    new_record,
    parse_record,
    secret_name,
)

# The Secret is not the operator's child (it would prune it): its own label says whose.
KEYS_FOR_LABEL = "tandem.dev/api-keys-for"
CONFLICT_RETRIES = 5


class KeysError(Exception):
    """One line for the user."""


def new_key_id(tenant: str, now: datetime) -> str:
    """``<tenant>-<yyyymmdd>-<4 hex>``: sortable, unique enough to never collide twice."""
    suffix = f"-{now:%Y%m%d}-{secrets.token_hex(2)}"
    return tenant[: 63 - len(suffix)].rstrip("-") + suffix


def with_key(data: dict[str, str], record: KeyRecord) -> dict[str, str]:
    """Pure: the Secret's ``stringData`` after adding ``record``."""
    if record.key_id in data:
        raise KeysError(f"a key with id {record.key_id!r} exists already")
    return {**data, record.key_id: dump_record(record)}


def without_key(data: dict[str, str], key_id: str) -> dict[str, str]:
    """Pure: the Secret's ``stringData`` after revoking ``key_id``."""
    if key_id not in data:
        known = ", ".join(sorted(data)) or "none"
        raise KeysError(f"no key with id {key_id!r} (keys: {known})")
    return {k: v for k, v in data.items() if k != key_id}


def records(data: dict[str, str]) -> list[KeyRecord | str]:
    """Each item as a record, or the item's problem as one line."""
    found: list[KeyRecord | str] = []
    for key_id, text in sorted(data.items()):
        try:
            found.append(parse_record(key_id, text))
        except ValueError as exc:
            found.append(str(exc))
    return found


# ----------------------------------------------------------------------------- I/O shell


class _Secrets:
    def __init__(self, api: kube_client.ApiClient, namespace: str, cluster: str) -> None:
        self.core = kube_client.CoreV1Api(api)
        self.custom = kube_client.CustomObjectsApi(api)
        self.namespace, self.cluster = namespace, cluster
        self.name = secret_name(cluster)

    async def check_cluster(self) -> None:
        try:
            await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "inferenceclusters", self.cluster
            )
        except ApiException as exc:
            if exc.status == 404:
                raise KeysError(
                    f"no InferenceCluster {self.cluster!r} in namespace {self.namespace!r} "
                    "(kubectl get inferenceclusters -A lists them)"
                ) from None
            raise

    async def read(self) -> tuple[dict[str, str], str | None]:
        """The Secret's items as text and its resourceVersion (None: no Secret yet)."""
        try:
            secret = await self.core.read_namespaced_secret(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return {}, None
            raise
        items = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        return items, secret.metadata.resource_version

    async def write(self, data: dict[str, str], version: str | None) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {KEYS_FOR_LABEL: self.cluster},
            },
            "stringData": data,
        }
        if version is None:
            await self.core.create_namespaced_secret(self.namespace, body)
        else:
            body["metadata"]["resourceVersion"] = version
            await self.core.replace_namespaced_secret(self.name, self.namespace, body)

    async def change(self, edit: Callable[[dict[str, str]], dict[str, str]]) -> None:
        for _ in range(CONFLICT_RETRIES):
            data, version = await self.read()
            try:
                await self.write(edit(data), version)
                return
            except ApiException as exc:
                if exc.status not in (409,):  # someone else wrote it first: read again
                    raise
        raise KeysError(f"Secret {self.name} kept changing under us; try again")


def _run(args: argparse.Namespace, work: Callable[[_Secrets], Awaitable[int]]) -> int:
    async def with_store(api: Any, namespace: str) -> int:
        store = _Secrets(api, args.namespace or namespace, args.cluster)
        try:
            await store.check_cluster()
            return await work(store)
        except KeysError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED

    return run_against_cluster(
        args.kubeconfig, args.context, with_store, failing_to="cannot reach Kubernetes"
    )


def cmd_add(args: argparse.Namespace) -> int:
    try:
        check_name("tenant", args.tenant, TENANT)
        now = datetime.now(UTC)
        key = new_key()
        record = new_record(args.id or new_key_id(args.tenant, now), args.tenant, key, now=now)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED

    async def add(store: _Secrets) -> int:
        await store.change(lambda data: with_key(data, record))
        print(key)
        print(
            f"key {record.key_id} of tenant {record.tenant} added to Secret "
            f"{store.namespace}/{store.name}; the frontends accept it within about a "
            "minute. This is the only time the key is shown.",
            file=sys.stderr,
        )
        return 0

    return _run(args, add)


def cmd_list(args: argparse.Namespace) -> int:
    async def show(store: _Secrets) -> int:
        data, _ = await store.read()
        rows = records(data)
        if not rows:
            print(f"no keys in Secret {store.namespace}/{store.name}", file=sys.stderr)
            return 0
        print(f"{'ID':<40} {'TENANT':<24} CREATED")
        for row in rows:
            if isinstance(row, KeyRecord):
                print(f"{row.key_id:<40} {row.tenant:<24} {row.created}")
            else:
                print(f"(ignored by the frontends) {row}")
        return 0

    return _run(args, show)


def cmd_revoke(args: argparse.Namespace) -> int:
    async def revoke(store: _Secrets) -> int:
        await store.change(lambda data: without_key(data, args.id))
        print(
            f"key {args.id} revoked; the frontends refuse it within about a minute",
            file=sys.stderr,
        )
        return 0

    return _run(args, revoke)


def register(sub: Any) -> None:
    keys = sub.add_parser(
        "keys",
        help="add, list and revoke a cluster's API keys",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    verbs = keys.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str, handler: Callable[[argparse.Namespace], int]) -> Any:
        parser = verbs.add_parser(name, help=help_text)
        parser.add_argument("cluster", help="the InferenceCluster's name")
        parser.add_argument("-n", "--namespace", help="default: the kubeconfig context's")
        parser.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
        parser.add_argument("--context", help="kubeconfig context (default: the current one)")
        parser.set_defaults(handler=handler)
        return parser

    add = verb("add", "make a key for a tenant and print it (once)", cmd_add)
    add.add_argument("--tenant", required=True, help="who the key belongs to (a DNS label)")
    add.add_argument("--id", help="the key's id (default: <tenant>-<date>-<4 hex>)")
    verb("list", "list key ids and tenants (never the keys)", cmd_list)
    revoke = verb("revoke", "revoke a key by id", cmd_revoke)
    revoke.add_argument("id", help="the key's id, as 'tandem keys list' shows it")
