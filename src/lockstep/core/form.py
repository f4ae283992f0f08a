"""Approval forms (pure): the fields an approval step asks its approvers to fill in, checked when the
definition is published (`parse_form`), and the values an approver sends, checked when they decide
(`check_values`, and `from_text` for the approval page's form fields, which arrive as text).

A form is a list of fields, a subset of JSON Schema per field: `type` string, number, integer, boolean
or date (a string `YYYY-MM-DD`), `enum` (strings), `minLength`/`maxLength`, `minimum`/`maximum`,
`required`, plus `label`, `description` and `sensitive` (the value is sealed with the run's key, as
sensitive input is). The compiled form is plain JSON recorded in the request's policy, so a decision
is checked against the form the request was made with, whatever was published since.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from .canonical import JSONObject, JSONValue

__all__ = [
    "FIELD_TYPES",
    "MAX_ENUM",
    "MAX_FIELDS",
    "MAX_LABEL",
    "MAX_STRING",
    "check_values",
    "from_text",
    "merged",
    "parse_form",
    "sensitive_fields",
]

FIELD_TYPES = ("string", "number", "integer", "boolean", "date")
# The bounds of a form (not tenant settings: a form is a page a person fills in, and every decision's
# values are stored in the run's history, so they bound the history's growth per decision).
MAX_FIELDS = 20
MAX_STRING = 4000  # the largest maxLength, and the maxLength of a string field that declares none
MAX_ENUM = 50
MAX_LABEL = 200
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_KEYS = (
    "name",
    "type",
    "label",
    "description",
    "required",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "sensitive",
)
_NUMERIC = ("number", "integer")


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def parse_form(raw: object, path: str) -> tuple[list[JSONObject], list[tuple[str, str]]]:
    """The compiled form and the problems found (path, what to fix); every field is checked, so an
    author sees every problem at once."""
    problems: list[tuple[str, str]] = []
    if not isinstance(raw, list) or not raw:
        return [], [(path, "must be a non-empty list of fields, e.g. [{name: amount, type: number}]")]
    if len(raw) > MAX_FIELDS:
        problems.append((path, f"{len(raw)} fields; a form has at most {MAX_FIELDS}"))
    out: list[JSONObject] = []
    seen: set[str] = set()
    for i, f in enumerate(raw[:MAX_FIELDS]):
        at = f"{path}[{i}]"
        if not isinstance(f, Mapping):
            problems.append((at, "must be a mapping with name and type"))
            continue
        field, found = _field(f, at)
        problems += found
        if field is None:
            continue
        if field["name"] in seen:
            problems.append((f"{at}.name", f"{field['name']} is named twice; each field needs its own name"))
        seen.add(field["name"])
        out.append(field)
    return out, problems


def _field(f: Mapping[str, Any], at: str) -> tuple[JSONObject | None, list[tuple[str, str]]]:
    problems = [
        (f"{at}.{k}", f"unknown field; a form field may have {', '.join(_KEYS)}") for k in f if k not in _KEYS
    ]
    name, kind = f.get("name"), f.get("type", "string")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append((f"{at}.name", "required: lowercase letters, digits and _, starting with a letter"))
        return None, problems
    if kind not in FIELD_TYPES:
        problems.append((f"{at}.type", f"must be one of {', '.join(FIELD_TYPES)}, not {kind!r}"))
        return None, problems
    out: JSONObject = {"name": name, "type": kind}
    for key, limit in (("label", MAX_LABEL), ("description", 4 * MAX_LABEL)):
        if key in f:
            if not isinstance(f[key], str) or not f[key].strip() or len(f[key]) > limit:
                problems.append((f"{at}.{key}", f"must be a text of 1 to {limit} characters"))
            else:
                out[key] = f[key]
    for key in ("required", "sensitive"):
        if key in f:
            if not isinstance(f[key], bool):
                problems.append((f"{at}.{key}", "must be true or false"))
            elif f[key]:
                out[key] = True
    if "enum" in f:
        e = f["enum"]
        if kind != "string":
            problems.append((f"{at}.enum", "an enum is a list of strings: give the field type: string"))
        elif (
            not isinstance(e, list)
            or not 1 <= len(e) <= MAX_ENUM
            or not all(isinstance(x, str) and 0 < len(x) <= MAX_LABEL for x in e)
            or len(set(e)) != len(e)
        ):
            problems.append(
                (f"{at}.enum", f"must be 1 to {MAX_ENUM} distinct strings of at most {MAX_LABEL} characters")
            )
        else:
            out["enum"] = list(e)
    problems += _bounds(f, at, kind, out)
    return out, problems


def _bounds(f: Mapping[str, Any], at: str, kind: str, out: JSONObject) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for key in ("minLength", "maxLength"):
        if key not in f:
            continue
        v = f[key]
        if kind != "string":
            problems.append((f"{at}.{key}", f"{key} bounds a string; this field is a {kind}"))
        elif isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_STRING:
            problems.append((f"{at}.{key}", f"must be an integer from 0 to {MAX_STRING}"))
        else:
            out[key] = v
    if kind == "string":
        out.setdefault("maxLength", MAX_STRING)
        if out.get("minLength", 0) > out["maxLength"]:
            problems.append((f"{at}.minLength", "is larger than maxLength: no value could be given"))
    for key in ("minimum", "maximum"):
        if key not in f:
            continue
        v = f[key]
        if kind not in _NUMERIC:
            problems.append((f"{at}.{key}", f"{key} bounds a number; this field is a {kind}"))
        elif not _number(v) or (kind == "integer" and not float(v).is_integer()):
            problems.append(
                (f"{at}.{key}", f"must be a finite {'integer' if kind == 'integer' else 'number'}")
            )
        else:
            out[key] = v
    if "minimum" in out and "maximum" in out and out["minimum"] > out["maximum"]:
        problems.append((f"{at}.minimum", "is larger than maximum: no value could be given"))
    return problems


def sensitive_fields(form: list[JSONObject]) -> tuple[str, ...]:
    return tuple(f["name"] for f in form if f.get("sensitive"))


def _one(field: JSONObject, v: JSONValue) -> str | None:
    """Why `v` is not a value of `field` (None: it is)."""
    kind = field["type"]
    if kind == "boolean":
        return None if isinstance(v, bool) else "must be true or false"
    if kind in _NUMERIC:
        if not _number(v) or (kind == "integer" and not float(v).is_integer()):
            return f"must be {'a whole number' if kind == 'integer' else 'a number'}"
        return _range(field, v)
    if not isinstance(v, str):
        return f"must be a {'date (YYYY-MM-DD)' if kind == 'date' else 'text'}"
    if kind == "date":
        try:
            if not _DATE.match(v):
                raise ValueError(v)
            date.fromisoformat(v)
        except ValueError:
            return "must be a date written YYYY-MM-DD, e.g. 2026-12-31"
        return None
    lo, hi = field.get("minLength", 0), field["maxLength"]
    if len(v) < lo:
        return f"must be at least {lo} characters (it has {len(v)})"
    if len(v) > hi:
        return f"must be at most {hi} characters (it has {len(v)})"
    if "enum" in field and v not in field["enum"]:
        return f"must be one of: {', '.join(field['enum'])}"
    return None


def _range(field: JSONObject, v: Any) -> str | None:
    if "minimum" in field and v < field["minimum"]:
        return f"must be at least {field['minimum']}"
    if "maximum" in field and v > field["maximum"]:
        return f"must be at most {field['maximum']}"
    return None


def check_values(form: list[JSONObject], values: object, decision: str) -> tuple[JSONObject, dict[str, str]]:
    """The values to record and, by field name, what is wrong (nothing is recorded unless it is empty).
    A required field must be given to approve (a required boolean must be true: a box to tick); a
    rejection may leave fields out, and what it gives is checked all the same."""
    errors: dict[str, str] = {}
    if not isinstance(values, Mapping):
        return {}, {"": "values must be an object mapping field names to values"}
    names = {f["name"] for f in form}
    for k in values:
        if k not in names:
            shown = str(k)[:64]
            errors[shown] = (
                f"{shown} is not a field of this form (fields: {', '.join(sorted(names)) or 'none'})"
            )
    out: JSONObject = {}
    for field in form:
        name = field["name"]
        v = values.get(name)
        if v is None or v == "":
            if field.get("required") and decision == "approve":
                errors[name] = "required to approve"
            continue
        why = _one(field, v)
        if why is None and field["type"] == "boolean" and field.get("required") and v is not True:
            why = "must be ticked to approve" if decision == "approve" else None
        if why is not None:
            errors[name] = why
        else:
            out[name] = v
    return out, errors


def from_text(form: list[JSONObject], posted: Mapping[str, str]) -> tuple[JSONObject, dict[str, str]]:
    """The values of the approval page's fields (`posted`: the form's text by field name; a checkbox
    left unticked is absent), as JSON values to check, and what could not be read as its type."""
    out: JSONObject = {}
    errors: dict[str, str] = {}
    for field in form:
        name, kind = field["name"], field["type"]
        text = posted.get(name)
        if kind == "boolean":
            out[name] = text is not None and text != ""
            continue
        if text is None or text.strip() == "":
            continue
        if kind in _NUMERIC:
            try:
                n = float(text.strip()) if kind == "number" else int(text.strip())
            except ValueError:
                errors[name] = f"must be {'a whole number' if kind == 'integer' else 'a number'}"
                continue
            out[name] = int(n) if isinstance(n, float) and n.is_integer() and "." not in text else n
        else:
            out[name] = text
    return out, errors


def merged(decisions: list[JSONObject]) -> JSONObject:
    """The values of every decision, field by field: a later decision's value wins."""
    out: JSONObject = {}
    for d in decisions:
        out.update(d.get("values") or {})
    return out
