"""Where a dev cluster keeps its files inside its state directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def default_state_dir() -> Path:
    """``$TANDEM_HOME/devcluster``, or ``~/.tandem/devcluster`` when TANDEM_HOME is unset."""
    home = os.environ.get("TANDEM_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".tandem"
    return base / "devcluster"


@dataclass(frozen=True, slots=True)
class StateLayout:
    """Paths of one cluster's files. Every entry lives under ``root``."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def token_file(self) -> Path:
        return self.root / "tokens.csv"

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_dir(self) -> Path:
        return self.root / "etcd"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    @property
    def lws_dir(self) -> Path:
        """The LeaderWorkerSet controller's kubeconfig, configuration and certificate."""
        return self.root / "lws"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def real_node_dir(self) -> Path:
        """The real node's files. Not an owned entry: only its supervisor may remove
        them, after unmounting what a crashed run may have left mounted there."""
        return self.root / "realnode"

    def log_file(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    def owned_entries(self) -> tuple[Path, ...]:
        """What a fresh start may delete: only files this layout creates, never ``root``
        itself, which may be a directory the user chose."""
        return (
            self.state_file,
            self.kubeconfig,
            self.token_file,
            self.pki_dir,
            self.etcd_dir,
            self.kwok_config,
            self.lws_dir,
            self.logs_dir,
        )
