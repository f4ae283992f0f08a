"""The `http` step: one HTTP request made by lockstep's own workers, with the response as the output.

- id: charge
  http:
    method: POST
    url: "https://api.example.com/charges"        # a template; checked against the egress policy
    headers: {Content-Type: application/json, X-Order: "${input.order}"}
    body: {amount: "${input.amount}"}             # JSON (a string is sent as text)
    auth: {secret: payments-api-key, scheme: bearer}   # or scheme: "header X-Api-Key"; version: 3 pins
    timeout: 10s                                  # the attempt's limit (default 30s)
    retry: {max_attempts: 5}                      # as on activity steps
    success: "response.status < 300"              # CEL over `response` (status, headers, body)
    max_response_bytes: 65536
    max_redirects: 3                              # each hop checked like the first (0: none followed)
    idempotency_header: Idempotency-Key           # the step's idempotency key goes here; false: not sent
  idempotency_key: "charge-${input.order}"        # optional, as on activity steps

It compiles to an activity step of the built-in activity `lockstep.http` (an `HttpStep`) whose input
template is the request: attempts, leases, fencing, retries, compensation-free. The secret is named,
never a value: a worker opens it when it sends the request (runtime/httpstep.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import cast

from ..canonical import JSONObject, JSONValue
from ..expr import ExprError, Template, compile_expr, compile_template
from .checks import Checker
from .model import DELIVERIES, HttpStep, Limits, RetryPolicy, Step
from .parse_steps import parse_priority, parse_queue, parse_retry
from .sensitivity import pointer_list

__all__ = [
    "DEFAULT_MAX_REDIRECTS",
    "DEFAULT_RESPONSE_BYTES",
    "DEFAULT_SUCCESS",
    "HTTP_ACTIVITY",
    "HTTP_KEYS",
    "METHODS",
    "SECRET_NAME_RE",
    "parse_http_step",
]

HTTP_ACTIVITY = "lockstep.http"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
DEFAULT_SUCCESS = "response.status < 300"
DEFAULT_TIMEOUT = timedelta(seconds=30)
DEFAULT_RESPONSE_BYTES = 64 * 1024
DEFAULT_MAX_REDIRECTS = 3
MAX_REDIRECTS = 10
MAX_HEADERS = 50
SECRET_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_.-]{0,62}[a-z0-9])?$")
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
# Headers the client sets itself (framing, the connection, the host it connects to): a definition that
# could set them could smuggle a second request or reach another virtual host.
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive"}
)
HTTP_KEYS = (
    "method",
    "url",
    "headers",
    "body",
    "auth",
    "timeout",
    "retry",
    "success",
    "max_response_bytes",
    "max_redirects",
    "idempotency_header",
)
STEP_KEYS = (
    "id",
    "http",
    "next",
    "description",
    "delivery",
    "idempotency_key",
    "queue",
    "priority",
    "output_sensitive",
)


def parse_http_step(c: Checker, i: int, raw: Mapping[str, object], lim: Limits, at: str) -> Step | None:
    sid = raw.get("id")
    if not isinstance(sid, str) or not re.match(r"^[a-z0-9_-]{1,64}$", sid):
        c.add(f"{at}[{i}].id", "required; lowercase letters, digits, - and _ (at most 64)")
        sid = f"#{i}"
    p = f"{at}[{i}]({sid})"
    c.keys(p, raw, STEP_KEYS)
    nxt = raw.get("next")
    if nxt is not None and not isinstance(nxt, str):
        c.add(f"{p}.next", "must be a step id or `end`")
        nxt = None
    body = raw["http"]
    hp = f"{p}.http"
    if not isinstance(body, Mapping):
        c.add(hp, 'must be a mapping such as {method: POST, url: "https://api.example.com/charges"}')
        return None
    c.keys(hp, body, HTTP_KEYS)
    timeout = DEFAULT_TIMEOUT
    if "timeout" in body:
        timeout = c.duration(f"{hp}.timeout", body["timeout"], lim.max_timeout) or DEFAULT_TIMEOUT
    request: JSONObject = {
        "method": _method(c, hp, body.get("method", "GET")),
        "url": _url(c, hp, body.get("url")),
        "headers": _headers(c, hp, body.get("headers", {})),
    }
    if "body" in body:
        request["body"] = _json(body["body"])
    auth = _auth(c, hp, body.get("auth"))
    if auth is not None:
        request["auth"] = auth
        headers = request["headers"]
        if isinstance(headers, dict) and any(str(k).lower() == _auth_header(auth) for k in headers):
            c.add(f"{hp}.headers", f"sets {_auth_header(auth)}, which auth sets from the secret: remove one")
    request["success"] = _success(c, hp, body.get("success", DEFAULT_SUCCESS))
    request["timeout_ms"] = int(timeout.total_seconds() * 1000)
    request["max_response_bytes"] = _bounded(
        c,
        f"{hp}.max_response_bytes",
        body.get("max_response_bytes", DEFAULT_RESPONSE_BYTES),
        1,
        lim.expressions.output_bytes,
        "the tenant's max_output_bytes (the output is stored)",
    )
    request["max_redirects"] = _bounded(
        c,
        f"{hp}.max_redirects",
        body.get("max_redirects", DEFAULT_MAX_REDIRECTS),
        0,
        MAX_REDIRECTS,
        f"{MAX_REDIRECTS}",
    )
    request["idempotency_header"] = _idempotency_header(
        c, hp, body.get("idempotency_header", "Idempotency-Key")
    )
    delivery = raw.get("delivery", "idempotent")
    if delivery not in DELIVERIES:
        c.add(f"{p}.delivery", f"must be one of {', '.join(DELIVERIES)}")
        delivery = "idempotent"
    key = raw.get("idempotency_key")
    key_t = None
    if key is not None:
        if not isinstance(key, str) or not key:
            c.add(f"{p}.idempotency_key", 'must be a non-empty string template, e.g. "charge-${input.order}"')
        else:
            key_t = c.template(f"{p}.idempotency_key", key)
    template = c.template(hp, request) or compile_template({})
    url = body.get("url")
    return HttpStep(
        id=sid,
        next=nxt,
        activity=HTTP_ACTIVITY,
        input=template,
        timeout=timeout,
        retry=parse_retry(c, f"{hp}.retry", body.get("retry"), RetryPolicy(), lim),
        delivery=str(delivery),
        idempotency_key=key_t,
        compensate=None,
        queue=parse_queue(c, f"{p}.queue", raw.get("queue")),
        priority=parse_priority(c, f"{p}.priority", raw.get("priority", 0)),
        output_sensitive=pointer_list(c, f"{p}.output_sensitive", raw.get("output_sensitive", False), lim),
        url=_quiet_template(url),
    )


def _json(value: object) -> JSONValue:
    # The document is JSON already (parse.non_json refuses the rest); this only narrows the type.
    return cast(JSONValue, value)


def _quiet_template(value: object) -> Template | None:
    """The URL's template, for the publish-time policy warning (its errors are reported with the rest)."""
    try:
        return compile_template(value) if isinstance(value, str) else None
    except ExprError:
        return None


def _method(c: Checker, hp: str, value: object) -> str:
    if not isinstance(value, str) or value.upper() not in METHODS:
        c.add(f"{hp}.method", f"must be one of {', '.join(METHODS)}")
        return "GET"
    return value.upper()


def _url(c: Checker, hp: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        c.add(f"{hp}.url", 'required: the URL template, e.g. "https://api.example.com/orders/${input.id}"')
        return ""
    head = value.split("${", 1)[0].lower()
    if not head.startswith(("https://", "http://")) and not value.startswith("${"):
        c.add(
            f"{hp}.url", "must start with https:// (http:// only where the tenant's egress policy allows it)"
        )
    return value


def _headers(c: Checker, hp: str, value: object) -> JSONObject:
    if not isinstance(value, Mapping):
        c.add(f"{hp}.headers", "must be a mapping of header names to string templates")
        return {}
    if len(value) > MAX_HEADERS:
        c.add(f"{hp}.headers", f"at most {MAX_HEADERS} headers")
    out: JSONObject = {}
    for name, v in value.items():
        if not isinstance(name, str) or not _TOKEN.match(name):
            c.add(f"{hp}.headers", f"{name!r} is not a header name (letters, digits and -)")
            continue
        if name.lower() in _RESERVED_HEADERS:
            c.add(f"{hp}.headers.{name}", "is set by the HTTP client itself: remove it")
            continue
        if not isinstance(v, str):
            c.add(f"{hp}.headers.{name}", "must be a string (a template)")
            continue
        out[name] = v
    return out


def _auth_header(auth: JSONObject) -> str:
    return str(auth.get("header", "authorization")).lower()


def _auth(c: Checker, hp: str, value: object) -> JSONObject | None:
    if value is None:
        return None
    ap = f"{hp}.auth"
    if not isinstance(value, Mapping):
        c.add(ap, "must be {secret: NAME, scheme: bearer} or {secret: NAME, scheme: header X-Api-Key}")
        return None
    c.keys(ap, value, ("secret", "scheme", "version"))
    name = value.get("secret")
    if not isinstance(name, str) or not SECRET_NAME_RE.match(name):
        c.add(
            f"{ap}.secret",
            "required: the name of a secret of this tenant (`lockstep secrets set NAME`): lowercase "
            "letters, digits, '.', '_' and '-' (a name, never a value or a template)",
        )
        name = ""
    out: JSONObject = {"secret": name}
    scheme = value.get("scheme", "bearer")
    if scheme == "bearer":
        out["scheme"] = "bearer"
    elif isinstance(scheme, str) and scheme.startswith("header ") and _TOKEN.match(scheme[7:].strip()):
        header = scheme[7:].strip()
        if header.lower() in _RESERVED_HEADERS:
            c.add(f"{ap}.scheme", f"{header} is set by the HTTP client itself: name another header")
        out["scheme"] = "header"
        out["header"] = header
    else:
        c.add(
            f"{ap}.scheme",
            "must be bearer (Authorization: Bearer <secret>) or `header NAME` (NAME: <secret>)",
        )
        out["scheme"] = "bearer"
    if "version" in value:
        v = value["version"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            c.add(f"{ap}.version", "must be a version number (>= 1); leave it out for the newest version")
        else:
            out["version"] = v
    return out


def _success(c: Checker, hp: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        c.add(f"{hp}.success", f'must be a CEL expression over response, e.g. "{DEFAULT_SUCCESS}"')
        return DEFAULT_SUCCESS
    if "${" in value:
        c.add(f"{hp}.success", "is a CEL expression, not a template: write response.status == 200, no ${...}")
        return DEFAULT_SUCCESS
    try:
        compile_expr(value, c.exl, roots=frozenset({"response"}))
    except ExprError as exc:
        c.add(f"{hp}.success", str(exc))
        return DEFAULT_SUCCESS
    return value


def _bounded(c: Checker, path: str, value: object, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        c.add(path, f"must be a whole number >= {low}")
        return low
    if value > high:
        c.add(path, f"{value} exceeds {what} ({high})")
        return high
    return value


def _idempotency_header(c: Checker, hp: str, value: object) -> str | None:
    if value is False or value is None:
        return None
    if not isinstance(value, str) or not _TOKEN.match(value) or value.lower() in _RESERVED_HEADERS:
        c.add(f"{hp}.idempotency_header", "must be a header name (default Idempotency-Key) or false")
        return "Idempotency-Key"
    return value
