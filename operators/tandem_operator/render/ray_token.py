"""The token a cluster's Ray groups authenticate with (pure).

A cluster with a pool whose workers start under Ray (``multinode.launches_ray_group``)
gets the Secret ``<cluster>-ray-token``, owned by the InferenceCluster: one random token
(``token``) that every pod of every group mounts, so Ray (``RAY_AUTH_MODE=token``) refuses
anything that does not present it. It is generated once and kept: Ray reads it when a node
starts, and a group restarts as a whole, so a token deleted with its Secret is replaced
and reaches each group when it next restarts. A Secret of that name the cluster does not
own is someone else's and is never overwritten.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

Manifest = dict[str, Any]

TOKEN_KEY = "token"


def generate_token() -> bytes:
    return secrets.token_hex(32).encode()


def render_ray_token_secret(meta: Manifest, token: bytes) -> Manifest:
    """``meta``: the Secret's name, namespace, labels and owner."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {TOKEN_KEY: base64.b64encode(token).decode()},
    }


def read_ray_token(secret: Manifest | None) -> bytes | None:
    """The token a Secret rendered above holds; None if it holds none."""
    encoded = (secret or {}).get("data", {}).get(TOKEN_KEY)
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded, validate=True) or None
    except (binascii.Error, ValueError):
        return None
