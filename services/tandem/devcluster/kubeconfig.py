"""Admin credentials for the dev cluster: the static token file and the kubeconfig."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

CONTEXT_NAME = "tandem-dev"
ADMIN_USER = "admin"
ADMIN_GROUP = "system:masters"


def render_token_line(token: str, user: str, group: str | None = None) -> str:
    """A kube-apiserver --token-auth-file line: the token, the user (its name and uid),
    and the group it is in, if any."""
    line = f"{token},{user},{user}" + (f',"{group}"' if group else "")
    return line + "\n"


def render_kubeconfig(*, server: str, ca_pem: bytes, token: str) -> dict[str, object]:
    """A single-context kubeconfig authenticating with the admin bearer token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT_NAME,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": CONTEXT_NAME, "user": {"token": token}}],
        "contexts": [
            {"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME}}
        ],
        "preferences": {},
        "current-context": CONTEXT_NAME,
    }


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, token: str) -> None:
    """Write the kubeconfig readable by the owner only (it holds a cluster-admin token)."""
    text = yaml.safe_dump(render_kubeconfig(server=server, ca_pem=ca_pem, token=token))
    write_private(path, text)


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, created with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)
