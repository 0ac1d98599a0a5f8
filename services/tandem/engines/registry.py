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
    "simulated": "tandem.engines.simulated",
    "trtllm": "tandem.engines.trtllm",  # an AsyncEngine (see tandem.engines.base)
}
# Engines that load the model from ``spec.model.source`` themselves: their
# ``create_engine`` also takes ``model_source``. (TensorRT-LLM gets the mounted model
# path in its rendered options instead.)
MODEL_SOURCE_ENGINES = frozenset({"reference"})


def make_engine(
    kind: str, options: Mapping[str, object], model_source: str | None = None
) -> Engine:
    module_name = ENGINE_MODULES.get(kind)
    if module_name is None:
        raise EngineError(
            f"unknown engine kind {kind!r}; available: {', '.join(sorted(ENGINE_MODULES))}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise EngineError(f"engine {kind!r} cannot be loaded here: {error}") from error
    if kind in MODEL_SOURCE_ENGINES:
        return cast(Engine, module.create_engine(options, model_source=model_source))
    return cast(Engine, module.create_engine(options))
