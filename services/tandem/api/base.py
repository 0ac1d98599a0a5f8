"""Building blocks shared by every API type: the pydantic base model and CEL rules.

Cross-field rules are written once, as CEL, and attached to the model that owns them.
The CRD generator copies them into ``x-kubernetes-validations`` (the API server enforces
them) and ``tandem validate`` evaluates the very same expressions with cel-python, so the
local check and the cluster can never disagree about what is valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema


@dataclass(frozen=True, slots=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry.

    ``field_path`` is relative to the object the rule is attached to (Kubernetes syntax,
    e.g. ``.minReplicas``); the API server reports violations at that path.
    """

    rule: str
    message: str
    field_path: str | None = None

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


class ApiModel(BaseModel):
    """Base for spec/status types: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )

    # Cross-field rules for this object, as CEL over ``self`` (the object, wire names).
    cel_rules: ClassVar[tuple[CelRule, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        if cls.cel_rules:
            target["x-kubernetes-validations"] = [r.to_schema() for r in cls.cel_rules]
        return schema

    def to_wire(self) -> dict[str, Any]:
        """The object as it appears in YAML / the API server (camelCase, no unset fields)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class OpenObject(BaseModel):
    """A Kubernetes sub-object we pass through untouched (affinity, pod template patches).

    Rendered in the CRD as ``x-kubernetes-preserve-unknown-fields``.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

    def as_dict(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
