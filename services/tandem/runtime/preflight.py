"""Checks ``tandem up`` (and, for package sources, ``tandem validate``) runs before any
process starts: the model file and the tokenizer's inputs exist on this machine, and no
worker needs more than the one process ``tandem up`` gives it.

A missing wheel or file is then one line naming the field and what to install, instead
of a frontend or worker that exits while starting. The processes check again when they
load (a file can vanish in between); these checks only make the common mistake cheap.
"""

from __future__ import annotations

from tandem.api.v1alpha1 import EngineKind, InferenceCluster, PoolRole, TokenizerKind
from tandem.api.validate import FieldError
from tandem.models.source import PKG_SCHEME, ModelSourceError, resolve_local_model_file
from tandem.tokenization import TokenizationError
from tandem.tokenization.o200k import quicktok_vocab_path
from tandem.tokenization.selection import tokenizer_kind

GGUF_MAGIC = b"GGUF"
SOURCE_PATH = "spec.model.source"


def package_source_errors(cluster: InferenceCluster, source: str = "") -> list[FieldError]:
    """A ``pkg://`` model source whose package or file is not installed here."""
    model_source = cluster.spec.model.source
    if model_source is None or not model_source.startswith(PKG_SCHEME):
        return []
    try:
        resolve_local_model_file(model_source)
    except ModelSourceError as exc:
        return [FieldError(source, SOURCE_PATH, str(exc))]
    return []


def local_run_errors(cluster: InferenceCluster, source: str = "") -> list[FieldError]:
    """Everything a local run needs from this machine for the model and its tokenizer."""
    spec = cluster.spec
    errors = _group_errors(cluster, source)
    try:
        kind = tokenizer_kind(spec.model, spec.engine.kind)
    except TokenizationError as exc:
        return [FieldError(source, "spec.model.tokenizer", str(exc))]
    if spec.model.source is not None:
        try:
            path = resolve_local_model_file(spec.model.source)
        except ModelSourceError as exc:
            return [FieldError(source, SOURCE_PATH, str(exc))]
        if kind is TokenizerKind.GGUF and not _starts_with(path, GGUF_MAGIC):
            errors.append(FieldError(source, SOURCE_PATH, f"{path} is not a GGUF file"))
    if kind is TokenizerKind.HARMONY:
        try:
            quicktok_vocab_path()
        except TokenizationError as exc:
            errors.append(FieldError(source, "spec.model.tokenizer", str(exc)))
    return errors


def _group_errors(cluster: InferenceCluster, source: str) -> list[FieldError]:
    """A reference worker split across pods (its ranks in a Ray group): ``tandem up``
    runs each worker as one process, and would run it whole without saying so."""
    if cluster.spec.engine.kind is not EngineKind.REFERENCE:
        return []
    errors = []
    pools = {PoolRole.PREFILL: cluster.spec.prefill, PoolRole.DECODE: cluster.spec.decode}
    for role, pool in pools.items():
        if pool.tensor_parallel_size > 1:
            errors.append(
                FieldError(
                    source,
                    f"spec.{role.value}.tensorParallelSize",
                    f"tandem up runs each worker as one process; a worker whose "
                    f"{pool.tensor_parallel_size} ranks span pods runs on Kubernetes (a "
                    "LeaderWorkerSet group under Ray, docs/gpu-deployment.md): set it to 1 "
                    "here",
                )
            )
    return errors


def _starts_with(path: object, magic: bytes) -> bool:
    with open(str(path), "rb") as f:
        return f.read(len(magic)) == magic
