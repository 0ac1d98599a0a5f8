"""Simulated storage for the dev cluster: a PersistentVolume for the model PVC the GPU
examples mount (``spec.model.source: pvc://models/...``), so their pods schedule on the
simulated GPU nodes as they would on a cluster whose storage holds the checkpoint.

It is pre-bound to ``inference/models`` (the claim ``manifests/storage/models-pvc.yaml``
creates) and, by node affinity, usable only on kwok nodes: simulated pods mount nothing,
and no pod on the real node can ever mount its host path.
"""

from __future__ import annotations

from typing import Any

from tandem.devcluster.nodes import KWOK_NODE_LABEL

MODELS_CLAIM = ("inference", "models")


def render_model_volume() -> dict[str, Any]:
    namespace, name = MODELS_CLAIM
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "dev-models", "labels": {"tandem.dev/simulated": "true"}},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany", "ReadOnlyMany", "ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            # Matches a claim that names no class on a cluster without a default class.
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": name},
            "hostPath": {"path": "/nonexistent/tandem-dev-models"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": KWOK_NODE_LABEL[0],
                                    "operator": "In",
                                    "values": [KWOK_NODE_LABEL[1]],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }
