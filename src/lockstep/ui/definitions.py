"""Definition pages: every definition with its versions; one definition's versions (digests, runs by
status), its diagram, its YAML, a side-by-side diff of two versions, and a start form built from its
`input_schema` (CSRF like every form; for users who may start runs; the answer is the new run's page)."""

from __future__ import annotations

import difflib
import json
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..core.canonical import JSONValue
from ..core.state import STATUSES
from ..errors import InvalidInput, LockstepError, NotFound
from .diagram import diagram
from .pages import Session, check_csrf, flash_redirect, page, service_of

__all__ = ["input_fields", "router", "side_by_side"]

router = APIRouter(prefix="/ui", include_in_schema=False)
SCALARS = ("string", "integer", "number", "boolean")


def _yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)


def side_by_side(old: str, new: str) -> list[tuple[str, str, str, str, str]]:
    """Rows of a two-column diff, the changes with three lines around each: (kind, old line number, old
    text, new line number, new text); kind is same, changed, removed, added, or gap (lines left out).
    The lines are text: the template escapes them."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[tuple[str, str, str, str, str]] = []
    ops = [
        op
        for group in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_grouped_opcodes(3)
        for op in [("gap", 0, 0, 0, 0), *group]
    ]
    for op, i1, i2, j1, j2 in ops[1:] if ops else []:
        if op == "gap":
            rows.append(("gap", "", "…", "", "…"))
            continue
        if op == "equal":
            pairs = zip(range(i1, i2), range(j1, j2), strict=True)
            rows += [("same", str(i + 1), a[i], str(j + 1), b[j]) for i, j in pairs]
            continue
        left, right = list(range(i1, i2)), list(range(j1, j2))
        for k in range(max(len(left), len(right))):
            i = left[k] if k < len(left) else None
            j = right[k] if k < len(right) else None
            kind = "changed" if i is not None and j is not None else ("removed" if j is None else "added")
            rows.append(
                (
                    kind,
                    "" if i is None else str(i + 1),
                    "" if i is None else a[i],
                    "" if j is None else str(j + 1),
                    "" if j is None else b[j],
                )
            )
    return rows


def input_fields(schema: Any) -> list[dict[str, Any]]:
    """The start form's fields: one per top-level property of an object schema (a scalar as an input of
    its type, anything else as JSON), required ones first as the schema lists them."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    required = [r for r in schema.get("required", []) if isinstance(r, str)]
    props: dict[str, Any] = schema["properties"]
    names = [n for n in required if n in props] + [n for n in props if n not in required]
    out = []
    for name in names:
        spec = props[name] if isinstance(props[name], dict) else {}
        kind = spec.get("type") if spec.get("type") in SCALARS else "json"
        out.append(
            {
                "name": name,
                "kind": kind,
                "required": name in required,
                "enum": spec.get("enum") if isinstance(spec.get("enum"), list) else None,
                "description": spec.get("description") if isinstance(spec.get("description"), str) else "",
            }
        )
    return out


def _value(field: dict[str, Any], raw: str) -> JSONValue:
    """A form field's text as the JSON value its schema type asks for."""
    name, kind = field["name"], field["kind"]
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw) if any(c in raw for c in ".eE") else int(raw)
        if kind == "boolean":
            return raw in ("true", "on", "1")
        if kind == "json":
            value: JSONValue = json.loads(raw)
            return value
    except ValueError:
        what = "a whole number" if kind == "integer" else "a number" if kind == "number" else "JSON"
        raise InvalidInput(f"field {name}: {raw[:40]!r} is not {what}") from None
    return raw


@router.get("/definitions", response_class=HTMLResponse)
def definitions_page(request: Request, session: Session) -> HTMLResponse:
    me, csrf = session
    me.require("read")
    versions = service_of(request).definitions(me.tenant)
    latest: dict[str, Any] = {}
    count: dict[str, int] = {}
    for d in versions:
        count[d.name] = count.get(d.name, 0) + 1
        if d.name not in latest or d.version > latest[d.name].version:
            latest[d.name] = d
    rows = [(latest[n], count[n]) for n in sorted(latest)]
    return page(request, "definitions.html", {"me": me, "csrf": csrf, "definitions": rows})


@router.get("/definitions/{name}", response_class=HTMLResponse)
def definition_page(
    request: Request, name: str, session: Session, version: int = 0, compare: int = 0
) -> HTMLResponse:
    me, csrf = session
    me.require("read")
    svc = service_of(request)
    versions = sorted((d for d in svc.definitions(me.tenant) if d.name == name), key=lambda d: d.version)
    if not versions:
        msg = f"There is no definition {name} in tenant {me.tenant}."
        ctx = {"me": me, "csrf": csrf, "title": "Definition not found", "message": msg}
        return page(request, "message.html", ctx, 404)
    known = {d.version for d in versions}
    shown = version if version in known else versions[-1].version
    document = svc.definition_document(me.tenant, name, shown).document
    with svc.read() as tx:
        rows = tx.run_counts(me.tenant, name)
    counts: dict[int, dict[str, int]] = {}
    for v, status, n in rows:
        counts.setdefault(v, {})[status] = n
    diff = None
    if compare in known and compare != shown:
        other = svc.definition_document(me.tenant, name, compare).document
        diff = side_by_side(_yaml(other), _yaml(document))
    compiled = svc.kernel.definition(me.tenant, name, shown)
    ctx = {
        "me": me,
        "csrf": csrf,
        "name": name,
        "versions": versions,
        "shown": shown,
        "compare": compare if diff is not None else 0,
        "counts": counts,
        "statuses": STATUSES,
        "yaml": _yaml(document),
        "diff": diff,
        "diagram": diagram(compiled),
        "description": compiled.description,
        "fields": input_fields(compiled.input_schema),
        "can_start": me.can("start"),
    }
    return page(request, "definition.html", ctx)


@router.post("/definitions/{name}/start")
async def start_run(request: Request, name: str, session: Session) -> Response:
    """Start a run of one version from the form: each field as its schema type, or the whole input as
    JSON when the schema names no fields. The run's page is the answer."""
    me, expected = session
    form = await request.form()
    check_csrf(expected, str(form.get("csrf", "")))
    back = f"/ui/definitions/{name}"
    svc = service_of(request)
    try:
        me.require("start")
        raw_version = str(form.get("version", ""))
        if not raw_version.isdigit():
            raise InvalidInput("give the version to start")
        version = int(raw_version)
        back += f"?version={version}"
        compiled = svc.kernel.definition(me.tenant, name, version)
        fields = input_fields(compiled.input_schema)
        data: JSONValue
        if fields:
            data = {}
            for f in fields:
                raw = str(form.get(f"in.{f['name']}", ""))
                if raw == "" and f["kind"] != "boolean":
                    continue  # left empty: absent (the schema says whether it may be)
                data[f["name"]] = _value(f, raw)
        else:
            text = str(form.get("input_json", "")).strip() or "{}"
            data = _value({"name": "input", "kind": "json"}, text)
        key = str(form.get("start_key", "")).strip() or None
        out = svc.start(me.tenant, name, input=data, key=key, version=version, actor=me.name)
    except NotFound:
        return flash_redirect(request, "/ui/definitions", f"Not started: no such version of {name}.")
    except LockstepError as exc:
        return flash_redirect(request, back, f"Not started: {exc}")
    said = "Run started." if out.created else "A run with this start key exists already: here it is."
    return flash_redirect(request, f"/ui/runs/{out.run_id}", said)
