"""Where a worker finds the model's weights: ``spec.model.source`` -> path + volumes (pure).

=================  =================================================  =====================
source             pod                                                engine's model
=================  =================================================  =====================
``pvc://C/P``      PVC ``C`` mounted read-only at ``/models``          ``/models/P``
``/abs/path``      nothing (the weights are in the image)             ``/abs/path``
``hf://ORG/NAME``  nothing (the engine downloads; give it HF_TOKEN)   ``ORG/NAME``
none               nothing                                            ``model.name``
=================  =================================================  =====================

``s3://`` needs a download step Tandem does not render yet: stage the weights on a PVC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tandem.api.v1alpha1 import ModelSpec

Manifest = dict[str, Any]

MODELS_MOUNT_PATH = "/models"
MODEL_VOLUME = "model"


class ModelSourceError(ValueError):
    """``spec.model.source`` cannot be turned into a path the engine can load."""


@dataclass(frozen=True, slots=True)
class ModelMount:
    path: str  # what the engine loads (a directory or a hub id)
    volumes: list[Manifest] = field(default_factory=list)
    volume_mounts: list[Manifest] = field(default_factory=list)


def render_model_mount(model: ModelSpec) -> ModelMount:
    source = model.source
    if source is None:
        return ModelMount(path=model.name)
    if source.startswith("pvc://"):
        claim, _, inner = source.removeprefix("pvc://").partition("/")
        if not claim:
            raise ModelSourceError(
                f"model.source {source!r}: pvc:// needs a claim name (pvc://CLAIM/PATH)"
            )
        path = f"{MODELS_MOUNT_PATH}/{inner.strip('/')}" if inner.strip("/") else MODELS_MOUNT_PATH
        return ModelMount(
            path=path,
            volumes=[
                {
                    "name": MODEL_VOLUME,
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                }
            ],
            volume_mounts=[
                {"name": MODEL_VOLUME, "mountPath": MODELS_MOUNT_PATH, "readOnly": True}
            ],
        )
    if source.startswith("hf://"):
        return ModelMount(path=source.removeprefix("hf://"))
    if source.startswith("/"):
        return ModelMount(path=source)
    raise ModelSourceError(
        f"model.source {source!r}: use pvc://CLAIM/PATH, an absolute path inside the image "
        "or hf://ORG/NAME (stage s3:// weights on a PVC)"
    )
