"""Generate the CustomResourceDefinitions from the pydantic models.

pydantic emits JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3 subset:
every node typed, no ``$ref``/``anyOf``/``null``, ``exclusiveMinimum`` as a boolean,
int-or-string marked explicitly. ``to_structural`` does that translation; the rest of
this module adds what only a CRD has (names, subresources, printer columns).
"""

from __future__ import annotations

from typing import Any

import yaml

from tandem.api import v1alpha1 as api
from tandem.api.base import ApiModel

Schema = dict[str, Any]

# Keywords that carry over unchanged from JSON Schema into a structural schema.
_KEPT = (
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "format",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
)


class CrdGenerationError(Exception):
    """The models use a construct with no structural-schema equivalent."""


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline a ``$ref``; keywords beside it (description, default) win over the target's."""
    if "$ref" not in node:
        return node
    target = defs[node["$ref"].rsplit("/", 1)[-1]]
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return _resolve(merged, defs)


def _collapse_any_of(node: Schema, defs: dict[str, Schema]) -> Schema:
    """``X | None`` becomes X (absence means None); ``int | str`` becomes int-or-string."""
    variants = [v for v in node["anyOf"] if v.get("type") != "null"]
    outer = {k: v for k, v in node.items() if k != "anyOf"}
    if outer.get("default", "unset") is None:
        del outer["default"]
    if len(variants) == 1:
        return {**_resolve(variants[0], defs), **outer}
    if sorted(v.get("type", "") for v in variants) == ["integer", "string"]:
        return {**outer, "x-kubernetes-int-or-string": True}
    raise CrdGenerationError(f"cannot express anyOf {node['anyOf']} structurally")


def _as_stored(value: Any) -> Any:
    """``value`` as the API server stores it: JSON has one number type, so ``30.0`` comes
    back as ``30``. A CRD that differs from its stored form conflicts under server-side
    apply between field managers (``kubectl apply --server-side``, then ``helm install``)
    even when both apply the same file."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_stored(v) for v in value]
    return value


def to_structural(node: Schema, defs: dict[str, Schema], *, in_status: bool = False) -> Schema:
    node = _resolve(node, defs)
    if "anyOf" in node:
        node = _collapse_any_of(node, defs)
    out: Schema = {k: _as_stored(node[k]) for k in _KEPT if k in node}
    if in_status:
        out.pop("default", None)  # status is observed, never defaulted
    if "exclusiveMinimum" in node:
        out.update(minimum=node["exclusiveMinimum"], exclusiveMinimum=True)
    if "exclusiveMaximum" in node:
        out.update(maximum=node["exclusiveMaximum"], exclusiveMaximum=True)
    if out.get("x-kubernetes-int-or-string") or out.get("x-kubernetes-preserve-unknown-fields"):
        if out.get("x-kubernetes-preserve-unknown-fields"):
            out["type"] = "object"
        return out

    kind = node.get("type")
    if kind is None:
        raise CrdGenerationError(f"untyped schema node: {node}")
    out["type"] = kind
    if kind == "object":
        props = node.get("properties", {})
        if props:
            required = set(node.get("required", ()))
            out["properties"] = {}
            for name, sub in props.items():
                child = to_structural(sub, defs, in_status=in_status)
                # Optional sub-objects default to {} so their own field defaults (and the
                # CEL rules that read them) apply even when the author left them out; not
                # those whose absence means something (``X | None = None``: spec.slo).
                if (
                    not in_status
                    and name not in required
                    and sub.get("default", "unset") is not None
                    and child.get("type") == "object"
                    and "properties" in child
                    and "default" not in child
                ):
                    child["default"] = _nested_defaults(child)
                out["properties"][name] = child
            if required:
                out["required"] = sorted(required)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = to_structural(extra, defs, in_status=in_status)
    elif kind == "array":
        out["items"] = to_structural(node["items"], defs, in_status=in_status)
    return out


def _nested_defaults(node: Schema) -> dict[str, Any]:
    """The object a defaulted sub-object becomes: the API server validates a default
    (including its CEL rules) without applying the defaults nested inside it, so ``{}``
    would fail rules that read those fields."""
    out: dict[str, Any] = {}
    for name, prop in node.get("properties", {}).items():
        if "default" in prop:
            out[name] = prop["default"]
    return out


def _metadata_schema(model: type[ApiModel]) -> Schema:
    """``metadata``, with ``name`` declared when a rule reports at ``.metadata.name``: the
    API server only accepts a rule's fieldPath if the schema declares that path."""
    if any((r.field_path or "").startswith(".metadata.name") for r in model.cel_rules):
        return {"type": "object", "properties": {"name": {"type": "string"}}}
    return {"type": "object"}


def _root_schema(model: type[ApiModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs = raw.get("$defs", {})
    props = raw["properties"]
    root: Schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _metadata_schema(model),
            "spec": to_structural(props["spec"], defs),
            "status": to_structural(props["status"], defs, in_status=True),
        },
        "required": ["spec"],
    }
    if raw.get("description"):  # the API server drops an empty one (see _as_stored)
        root["description"] = raw["description"]
    if model.cel_rules:
        root["x-kubernetes-validations"] = [r.to_schema() for r in model.cel_rules]
    return root


def _column(name: str, kind: str, path: str) -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": path}


def _condition_column(name: str, condition: str) -> dict[str, str]:
    return {
        "name": name,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status',
    }


def render_inference_cluster_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"inferenceclusters.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "InferenceCluster",
                "listKind": "InferenceClusterList",
                "plural": "inferenceclusters",
                "singular": "inferencecluster",
                "shortNames": ["ic", "icl"],
                "categories": ["tandem"],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        _condition_column("Ready", "Ready"),
                        {
                            "name": "Prefill",
                            "type": "integer",
                            "jsonPath": ".status.pools.prefill.ready",
                        },
                        {
                            "name": "Decode",
                            "type": "integer",
                            "jsonPath": ".status.pools.decode.ready",
                        },
                        # planning.mode check/auto: the planned or checked shape.
                        _column("Plan", "string", ".status.plan.shape"),
                        _condition_column("SLO", "SloPredicted"),
                        # -o wide: whether the plan is for spec.workload or the observed one.
                        {
                            "name": "Workload",
                            "type": "string",
                            "jsonPath": ".status.workload.planned.source",
                            "priority": 1,
                        },
                        {
                            "name": "Replans",
                            "type": "integer",
                            "jsonPath": ".status.workload.replans",
                            "priority": 1,
                        },
                        _column("Endpoint", "string", ".status.endpoint"),
                        _column("Age", "date", ".metadata.creationTimestamp"),
                    ],
                    "schema": {"openAPIV3Schema": _root_schema(api.InferenceCluster)},
                }
            ],
        },
    }


def render_worker_pool_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"workerpools.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "WorkerPool",
                "listKind": "WorkerPoolList",
                "plural": "workerpools",
                "singular": "workerpool",
                "shortNames": ["wp"],
                "categories": ["tandem"],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        _column("Role", "string", ".spec.role"),
                        _column("Desired", "integer", ".spec.replicas"),
                        _column("Ready", "integer", ".status.readyReplicas"),
                        _column("Age", "date", ".metadata.creationTimestamp"),
                    ],
                    "schema": {"openAPIV3Schema": _root_schema(api.WorkerPool)},
                }
            ],
        },
    }


# File name (identical under manifests/crds/ and charts/tandem/crds/) -> CRD.
def render_crds() -> dict[str, dict[str, Any]]:
    return {
        f"{api.GROUP}_inferenceclusters.yaml": render_inference_cluster_crd(),
        f"{api.GROUP}_workerpools.yaml": render_worker_pool_crd(),
    }


HEADER = "# Generated by `tandem crds --write` from tandem/api/v1alpha1.py. Do not edit.\n"


def dump_crd(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100)
