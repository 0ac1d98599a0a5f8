"""Worker settings (from the command line, or built directly by tests and launchers)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tandem.api.v1alpha1 import TokenizerKind
from tandem.tokenization.selection import TokenizerChoice
from tandem.worker.admission import AdmissionLimits
from tandem.worker.types import Role


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    role: Role
    worker_id: str
    incarnation: str
    engine: str = "reference"
    engine_options: Mapping[str, object] = field(default_factory=dict)
    tokenizer: TokenizerChoice = field(default_factory=lambda: TokenizerChoice(TokenizerKind.BYTE))
    # spec.model.source, for engines that load the model themselves (reference: a .gguf
    # file means GGUF weights; None means random weights).
    model_source: str | None = None
    host: str = "127.0.0.1"  # gRPC bind address
    port: int = 0  # 0: any free port (printed in the READY line)
    advertise_host: str = ""  # how peers reach us; defaults to host
    kv_backend: str = "tcp"
    kv_host: str = ""  # TCP KV listener bind address; defaults to host
    kv_port: int = 0
    kv_transfer_timeout_s: float = 30.0
    # Prefilled KV waits this long for a decode worker's claim; a claim pins it for the
    # claimed read time plus kv_pin_margin_s (this host's monotonic clock).
    lease_s: float = 60.0
    kv_pin_margin_s: float = 5.0
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)
    drain_grace_s: float = 30.0
    rpc_timeout_s: float = 10.0  # worker -> worker calls (KvAgent, ClaimKv, Release)
    # A peer worker not called for this long is forgotten (channel, KV metadata).
    peer_idle_s: float = 300.0
    # The cluster's credentials (mutual TLS on gRPC and TCP KV); None: plaintext, which
    # the worker allows on loopback addresses only.
    credentials_dir: Path | None = None
    admin_socket: Path | None = None  # Unix socket serving /drain (the preStop hook)

    @property
    def public_host(self) -> str:
        return self.advertise_host or self.host
