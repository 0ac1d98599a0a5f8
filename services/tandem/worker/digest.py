"""Which engines may exchange KV: a digest of the model and its KV layout.

An engine that can tell publishes ``EngineInfo.extra["config_digest"]`` (the reference
engine hashes its weights' identity and KV layout). For an engine that does not, the
digest covers what every worker of a pool knows the same way about it: the engine kind,
model name, vocabulary, KV block size and end-of-sequence token (not per-worker extras
such as its role; runtime versions are the engine's own check). A decode worker refuses
KV from a prefill worker with another digest: bytes of another model would decode into
garbage without any error.
"""

from __future__ import annotations

import hashlib

from tandem.engines.base import EngineInfo


def compute_config_digest(info: EngineInfo) -> str:
    published = info.extra.get("config_digest")
    if published:
        return published
    facts = (
        f"engine={info.extra.get('engine', '')}",
        f"model_name={info.model_name}",
        f"vocab_size={info.vocab_size}",
        f"kv_block_size={info.kv_block_size}",
        f"eos_token_id={info.eos_token_id}",
    )
    return hashlib.sha256(";".join(facts).encode()).hexdigest()[:16]
