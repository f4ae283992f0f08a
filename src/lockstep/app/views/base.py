"""What every read model shares: the frozen `View` base, `Recorded[T]` for JSON the core recorded, the
marker a view shows for a value too large to show, and `plain()`, a view's JSON as Python values.

Views are pydantic models because FastAPI documents them directly (the OpenAPI document describes every
field from the one definition the CLI, the UI and the Python API use too). A view is built by the
application layer from the state it read, so its fields are validated once, when it is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, TypeAdapter
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from ...core.canonical import JSONObject, JSONValue

__all__ = ["Marker", "Recorded", "TenantJson", "View", "plain"]

T = TypeVar("T")

# What a view shows for a stored value that no view can show (core/shape.py: for_view).
Marker = Annotated[
    str, Field(description="a stored value too large or too deeply nested to show, replaced by this note")
]

# A value a tenant supplies or an activity returns: any JSON (checked against the tenant's limits and,
# for a run's input, its definition's input_schema, never against a fixed shape).
TenantJson = Annotated[JSONValue, Field(description="any JSON value, as the tenant or its activity gave it")]


class View(BaseModel):
    """A read model: frozen, every field declared, nothing extra."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def plain(self) -> JSONObject:
        """The view's JSON as Python values: what `--json` prints and the Python API returns."""
        return self.model_dump()


def plain(value: object) -> JSONValue:
    """`value` with every view in it (also inside lists and dicts) replaced by its plain JSON."""
    if isinstance(value, View):
        return value.plain()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def _inline(schema: JSONObject) -> JSONObject:
    """`schema` with its local $defs substituted where they are referenced (the OpenAPI document then
    needs no extra components for the shapes of recorded JSON)."""
    defs = schema.pop("$defs", {})

    def walk(node: JSONValue) -> JSONValue:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: JSONObject = walk(schema)
    return out


class _AsRecorded:
    """Pass a value through as recorded (no validation, no reordering of keys, no serializer warnings
    when the core adds a key) and document it with the JSON schema of its declared type."""

    def __init__(self, declared: Any) -> None:
        self.declared = declared

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.any_schema()

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _inline(TypeAdapter(self.declared).json_schema(mode="serialization"))


if TYPE_CHECKING:
    # For mypy, Recorded[X] is X.
    Recorded = Annotated[T, ...]
else:

    class Recorded:
        """`Recorded[X]`: JSON the core recorded in a run's history (an error, a cancel, an approval
        request...), typed by the TypedDict X for readers and the OpenAPI document, and shown exactly as
        recorded: the JSON bodies are the recorded values, key for key and in the same order."""

        def __class_getitem__(cls, declared: Any) -> Any:
            return Annotated[declared, _AsRecorded(declared)]
