"""Which weights the reference engine runs, from the model source (``spec.model.source``,
handed to the worker): none means the deterministic random gpt-oss-shaped model, a
``.gguf`` file a llama-architecture model read from it."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from tandem.engines.base import EngineError
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.gguf_weights import open_gguf, read_architecture, read_weights
from tandem.engines.reference.weights import ModelWeights, init_weights
from tandem.models import ModelSourceError, resolve_local_model_file

logger = logging.getLogger(__name__)


def load_model(
    options: Mapping[str, object], model_source: str | None = None
) -> tuple[ReferenceModelConfig, ModelWeights]:
    if not model_source:
        config = ReferenceModelConfig.from_options(options)
        return config, init_weights(config)
    try:
        path = resolve_local_model_file(model_source)
    except ModelSourceError as exc:
        raise EngineError(str(exc)) from exc
    if path.suffix.lower() != ".gguf":
        raise EngineError(
            f"model.source {model_source!r}: the reference engine loads GGUF files "
            "(*.gguf), or random weights when no source is given"
        )
    started = time.monotonic()
    reader = open_gguf(path)
    config = ReferenceModelConfig.from_options(options, read_architecture(reader, path))
    weights = read_weights(reader, config, path)
    logger.info(
        "loaded %s from %s in %.1fs: %.0f MiB of float32 weights",
        config.model_name,
        path,
        time.monotonic() - started,
        weights.nbytes / 2**20,
    )
    return config, weights
