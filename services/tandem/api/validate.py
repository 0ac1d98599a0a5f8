"""Load and validate Tandem manifests: YAML -> typed objects, or errors with field paths.

Validation runs in two passes, the same two the API server applies to our CRDs:
1. the schema (pydantic: types, ranges, enums, unknown fields), and
2. the cross-field CEL rules attached to the models, evaluated with cel-python on the
   object *after defaulting*, exactly as the API server sees it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy.adapter import json_to_cel
from pydantic import BaseModel, ValidationError

from tandem.api import v1alpha1 as api
from tandem.api.base import ApiModel

KINDS: dict[str, type[ApiModel]] = {
    "InferenceCluster": api.InferenceCluster,
    "WorkerPool": api.WorkerPool,
}


@dataclass(frozen=True, slots=True)
class FieldError:
    source: str  # file name and document index, e.g. "cluster.yaml#0"
    path: str  # e.g. "spec.prefill.minReplicas"
    message: str

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        field = f"{self.path}: " if self.path else ""  # "" when the whole file is at fault
        return f"{where}{field}{self.message}"


class ManifestError(Exception):
    """One or more documents are invalid; ``errors`` lists every problem found."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def _pydantic_errors(exc: ValidationError, source: str) -> list[FieldError]:
    out = []
    for err in exc.errors(include_url=False):
        path = ""
        for part in err["loc"]:
            path = _join(path, part)
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        out.append(FieldError(source, path, message))
    return out


_CEL_ENV = celpy.Environment()
# One evaluation at a time: manifests are validated from several threads at once (clusters
# started in parallel), and celpy does not say its shared Environment is thread-safe. A
# full run once failed a valid spec's rule with "no such member" on fields it has.
_CEL_LOCK = threading.Lock()


def _cel_passes(
    rule: str, subject: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> bool:
    activation = {"self": json_to_cel(dict(subject))}
    if old is not None:
        activation["oldSelf"] = json_to_cel(dict(old))
    with _CEL_LOCK:
        program = _CEL_ENV.program(_CEL_ENV.compile(rule))
        result = program.evaluate(activation)
    return bool(result)


def is_transition_rule(rule: str) -> bool:
    """A rule about a change (it reads ``oldSelf``): the API server runs it on updates only."""
    return "oldSelf" in rule


def _walk_models(obj: BaseModel, path: str) -> Iterator[tuple[ApiModel, str]]:
    if isinstance(obj, ApiModel):
        yield obj, path
    for name, field in type(obj).model_fields.items():
        value = getattr(obj, name)
        wire = field.alias or name
        if isinstance(value, BaseModel):
            yield from _walk_models(value, _join(path, wire))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from _walk_models(item, _join(_join(path, wire), i))


def check_cel_rules(
    obj: ApiModel, source: str = "", previous: ApiModel | None = None
) -> list[FieldError]:
    """Every CEL rule of every model in ``obj``'s tree, evaluated on its defaulted form;
    the transition rules only against ``previous`` (an update), as the API server does."""
    before = {path: model for model, path in _walk_models(previous, "")} if previous else {}
    errors = []
    for model, path in _walk_models(obj, ""):
        if not model.cel_rules:
            continue
        wire = model.to_wire()
        for rule in model.cel_rules:
            old = None
            if is_transition_rule(rule.rule):
                prior = before.get(path)
                if prior is None or type(prior) is not type(model):
                    continue
                old = prior.to_wire()
            if not _cel_passes(rule.rule, wire, old):
                where = path + (rule.field_path or "")
                errors.append(FieldError(source, where.lstrip("."), rule.message))
    return errors


def parse_object(doc: Any, source: str = "", previous: ApiModel | None = None) -> ApiModel:
    """Validate one decoded YAML/JSON document into its API type; with ``previous`` (the
    object as it is now) also as an update of it."""
    if not isinstance(doc, dict):
        raise ManifestError([FieldError(source, "", "a document must be a mapping")])
    kind = doc.get("kind")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        expected = " or ".join(KINDS)
        raise ManifestError([FieldError(source, "kind", f"must be {expected}, got {kind!r}")])
    try:
        # Strict JSON-mode types, as the API server checks them: "3" is no integer there,
        # 3 is a valid number, enums are their string values.
        # default=str: a YAML date reaches the API server as a string too.
        obj = model.model_validate_json(json.dumps(doc, default=str), strict=True)
    except ValidationError as exc:
        raise ManifestError(_pydantic_errors(exc, source)) from None
    errors = check_cel_rules(obj, source, previous)
    if errors:
        raise ManifestError(errors)
    return obj


def parse_inference_cluster(doc: Any, source: str = "") -> api.InferenceCluster:
    """``parse_object`` for a document that must be an InferenceCluster (one a program
    writes: a benchmark's or a fault scenario's cluster)."""
    obj = parse_object(doc, source)
    if not isinstance(obj, api.InferenceCluster):
        raise ManifestError(
            [FieldError(source, "kind", f"must be InferenceCluster, got {type(obj).__name__}")]
        )
    return obj


def load_documents(text: str, source: str, previous: Sequence[ApiModel] = ()) -> list[ApiModel]:
    """All documents of a YAML stream; collects every error before raising. An object of
    ``previous`` with the same kind and name is what the document updates."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError([FieldError(source, "", f"malformed YAML: {where}{problem}")]) from None
    if not docs:
        raise ManifestError([FieldError(source, "", "no documents found")])
    objects: list[ApiModel] = []
    errors: list[FieldError] = []
    for index, doc in enumerate(docs):
        try:
            where = f"{source}#{index}" if len(docs) > 1 else source
            objects.append(parse_object(doc, where, _previous_of(doc, previous)))
        except ManifestError as exc:
            errors.extend(exc.errors)
    if errors:
        raise ManifestError(errors)
    return objects


def _previous_of(doc: Any, previous: Sequence[ApiModel]) -> ApiModel | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return None
    key = (doc.get("kind"), doc["metadata"].get("name"))
    for obj in previous:
        if (getattr(obj, "kind", None), obj.metadata.name) == key:  # type: ignore[attr-defined]
            return obj
    return None


def load_file(path: str | Path, previous: Sequence[ApiModel] = ()) -> list[ApiModel]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ManifestError([FieldError(str(p), "", f"cannot read: {exc.strerror}")]) from None
    return load_documents(text, str(p), previous)


def load_inference_cluster(path: str | Path) -> api.InferenceCluster:
    """Exactly one InferenceCluster from a file (what ``tandem up`` consumes)."""
    objects = load_file(path)
    clusters = [o for o in objects if isinstance(o, api.InferenceCluster)]
    if len(clusters) != 1:
        raise ManifestError(
            [FieldError(str(path), "", f"expected one InferenceCluster, found {len(clusters)}")]
        )
    return clusters[0]
