"""Engines by name, imported lazily so a worker only loads the runtime it uses (the
TensorRT-LLM engine imports CUDA libraries that do not exist on CPU machines)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import cast

from tandem.engines.base import Engine, EngineError

# kind -> module exposing ``create_engine(options: Mapping[str, object]) -> Engine``.
ENGINE_MODULES: dict[str, str] = {
    "reference": "tandem.engines.reference",
    "trtllm": "tandem.engines.trtllm",  # an AsyncEngine (see tandem.engines.base)
}


def make_engine(kind: str, options: Mapping[str, object]) -> Engine:
    module_name = ENGINE_MODULES.get(kind)
    if module_name is None:
        raise EngineError(
            f"unknown engine kind {kind!r}; available: {', '.join(sorted(ENGINE_MODULES))}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise EngineError(f"engine {kind!r} cannot be loaded here: {error}") from error
    return cast(Engine, module.create_engine(options))
