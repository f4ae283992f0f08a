"""The `wait_event` step: wait, holding nothing, for an external event with a correlation key.

- id: delivered
  wait_event:
    name: parcel-delivered           # the event's name (lowercase letters, digits and -)
    key: "${input.tracking_no}"      # the correlation key (a template: one key per run, or per lane)
    timeout: 7d                      # required; then on_timeout applies
    on_timeout: fail                 # fail | <step id>
    schema: {type: object, required: [at]}   # optional: the payload must match this JSON Schema
    callback: true                   # or {integration: carrier}: a per-wait signed callback URL
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import jsonschema

from ..expr import compile_template
from .checks import NAME_RE, Checker, step_header
from .model import Limits, Step, WaitEventStep

__all__ = ["parse_wait_event_step"]

_KEYS = ("name", "key", "timeout", "on_timeout", "schema", "callback")


def parse_wait_event_step(c: Checker, i: int, raw: Mapping[str, object], lim: Limits, at: str) -> Step | None:
    sid, p, nxt = step_header(c, i, raw, at, "wait_event")
    body = raw["wait_event"]
    wp = f"{p}.wait_event"
    if not isinstance(body, Mapping):
        c.add(wp, 'must be a mapping such as {name: parcel-delivered, key: "${input.id}", timeout: 7d}')
        return None
    c.keys(wp, body, _KEYS)
    name = body.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        c.add(
            f"{wp}.name",
            "required: the event's name (lowercase letters, digits and -, e.g. parcel-delivered)",
        )
        name = ""
    if "key" not in body:
        c.add(f"{wp}.key", 'required: the correlation key, e.g. "${input.tracking_no}"')
    key = c.template(f"{wp}.key", body.get("key", "")) or compile_template("")
    if "timeout" not in body:
        c.add(f"{wp}.timeout", "required: how long to wait for the event, e.g. timeout: 7d")
        timeout = timedelta(days=1)
    else:
        timeout = c.duration(f"{wp}.timeout", body["timeout"], lim.max_wait) or timedelta(days=1)
    on_timeout = body.get("on_timeout", "fail")
    if not isinstance(on_timeout, str) or not on_timeout or on_timeout == "reject":
        c.add(f"{wp}.on_timeout", "must be fail or a step id")
        on_timeout = "fail"
    schema = body.get("schema")
    if schema is not None:
        if not isinstance(schema, Mapping):
            c.add(f"{wp}.schema", "must be a JSON Schema object, e.g. {type: object, required: [at]}")
            schema = None
        else:
            try:
                jsonschema.Draft202012Validator.check_schema(dict(schema))
            except jsonschema.SchemaError as exc:
                c.add(f"{wp}.schema", f"not a valid JSON Schema: {exc.message}")
                schema = None
    callback, integration = _callback(c, f"{wp}.callback", body.get("callback", False))
    return WaitEventStep(
        id=sid,
        next=nxt,
        name=name,
        key=key,
        timeout=timeout,
        on_timeout=on_timeout,
        schema=dict(schema) if isinstance(schema, Mapping) else None,
        callback=callback,
        integration=integration,
    )


def _callback(c: Checker, path: str, value: object) -> tuple[bool, str | None]:
    """`callback: true` (unsigned), `callback: {integration: NAME}` (signed), or false."""
    if isinstance(value, bool):
        return value, None
    if isinstance(value, Mapping):
        c.keys(path, value, ("integration",))
        name = value.get("integration")
        if isinstance(name, str) and NAME_RE.match(name):
            return True, name
        c.add(f"{path}.integration", "must name a tenant integration (`lockstep integrations set`)")
        return True, None
    c.add(path, "must be true, false or {integration: NAME} (a signed callback)")
    return False, None
