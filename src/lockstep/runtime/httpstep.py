"""The built-in activity `lockstep.http`: the executor of `http` steps in lockstep's own workers.

An http step is an activity step whose input is the rendered request (core/definition/parse_http.py),
so its attempt is leased, fenced, heartbeaten and retried like any other. This executor runs one
attempt: it reads the tenant's egress policy, opens the named secret (through `HttpPorts.open_secret`:
audited, never logged, never returned), sends the request to the checked address of every hop
(runtime/egress.py), bounds the response in size and time, and returns it as the step's output:

    {"status": 201, "headers": {...}, "body": <JSON or text>, "url": <final URL>,
     "auth": {"secret": NAME, "version": N}}

A response for which `success` (CEL over `response`) is false fails the attempt with code
`HttpStatus<status>`: retried for 5xx, 408, 425, 429 and for a 2xx that `success` refused; not
retried for 3xx (a redirect not followed) and other 4xx (the request itself is wrong; `non_retryable`
can stop more codes from being retried). Refusals by the egress policy, an oversize response, a missing
secret and too many redirects are not retried either; timeouts and lost connections are.

The step's idempotency key is sent in `Idempotency-Key` (or the step's `idempotency_header`) on every
attempt, so a server that applied a request whose answer was lost sees the same key on the retry.
Remote HTTP workers never get these tasks: a task protocol worker must not hold tenant secrets.
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import urljoin, urlsplit

import httpx

from ..core.canonical import JSONObject, JSONValue
from ..core.definition.parse_http import HTTP_ACTIVITY
from ..core.egress import EgressPolicy
from ..core.expr import Expr, ExprError, compile_expr, evaluate
from .activity import ActivityContext, ActivityError
from .egress import EgressGuard, EgressRefused, Hop, PinnedTransport, Unresolved

__all__ = ["HTTP_ACTIVITY", "HttpExecutor", "HttpPorts", "builtin_activities", "retryable_status"]

REPORT_ROOM_S = 0.5  # of a step's timeout kept for reporting an HTTP timeout (at least 10% of it)

REDIRECTS = (301, 302, 303, 307, 308)
MAX_OUTPUT_HEADERS = 50
MAX_HEADER_CHARS = 1024
SNIPPET = 200  # characters of a failed response's body in the error message
USER_AGENT = "lockstep-http/1"


class HttpPorts(Protocol):
    """What the executor needs of the application layer (Service implements it)."""

    def egress_policy(self, tenant: str) -> EgressPolicy: ...
    def egress_refused(self, tenant: str, run_id: str, step: str, url: str, reason: str) -> None: ...
    def open_secret(
        self, tenant: str, name: str, version: int | None, run_id: str, step: str
    ) -> tuple[int, str]:
        """(version, clear value) of the tenant's secret; Refused (audited) when it cannot be used."""
        ...


class _Service(HttpPorts, Protocol):
    @property
    def server_limits(self) -> Mapping[str, int]: ...


def builtin_activities(service: _Service) -> dict[str, Callable[[JSONValue, ActivityContext], JSONValue]]:
    """The built-in activities a database worker runs: `lockstep.http`, with the server's loopback switch."""
    guard = EgressGuard(loopback_ok=service.server_limits.get("egress_allow_loopback", 0) == 1)
    # httpx logs every request's URL (a query may carry a token) at INFO and httpcore every header it
    # receives at DEBUG (a server that echoes the credential): neither may reach a worker's log.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return {HTTP_ACTIVITY: HttpExecutor(service, guard)}


def retryable_status(status: int) -> bool:
    """Whether an unsuccessful response is worth another attempt (the default; see the module doc)."""
    return status >= 500 or status in (408, 425, 429) or status < 300


@functools.lru_cache(maxsize=256)
def _success(source: str) -> Expr:
    return compile_expr(source, roots=frozenset({"response"}))


class HttpExecutor:
    def __init__(
        self, ports: HttpPorts, guard: EgressGuard, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.ports = ports
        self.guard = guard
        self.ssl_context = ssl_context or ssl.create_default_context()

    def __call__(self, request: JSONValue, ctx: ActivityContext) -> JSONValue:
        if not isinstance(request, dict):
            raise ActivityError(
                "HttpInvalidRequest", "the http step's input is not a request", retryable=False
            )
        method = str(request.get("method", "GET"))
        url = str(request.get("url", ""))
        # The call ends before the attempt's deadline, with room to report it: else the lease expires
        # first on a busy machine and the attempt fails as a bare Timeout instead of saying HttpTimeout.
        step_s = float(_int(request.get("timeout_ms"), 30_000)) / 1000
        timeout_s = max(min(step_s * 0.9, step_s - REPORT_ROOM_S), 0.1)
        deadline = time.monotonic() + timeout_s
        limit = _int(request.get("max_response_bytes"), 64 * 1024)
        max_redirects = _int(request.get("max_redirects"), 3)
        hops_left = max_redirects
        headers = self._headers(request, ctx)
        secret, auth_out, scrub = self._secret(request, ctx)
        if secret is not None:
            headers.update(secret)
        content, body_type = _content(request)
        if content is not None and body_type and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = body_type
        policy = self.ports.egress_policy(ctx.tenant)
        origin = _origin(url)
        while True:
            try:
                hop = self.guard.vet(policy, url)
            except EgressRefused as exc:
                self.ports.egress_refused(ctx.tenant, ctx.run_id, ctx.step_id, _shown(url), str(exc))
                raise ActivityError(
                    "EgressRefused", f"{method} {_shown(url)}: {exc}", retryable=False
                ) from None
            except Unresolved as exc:
                raise ActivityError("HttpConnectionError", str(exc)) from None
            status, reason, got, body = self._send(hop, method, headers, content, deadline, limit)
            location = got.get("location")
            if status in REDIRECTS and location and max_redirects > 0:  # 0: a 3xx is the answer
                if hops_left == 0:
                    raise ActivityError(
                        "HttpTooManyRedirects",
                        f"{method} {_shown(url)} redirects again (to {_shown(location)}) after the step's "
                        "max_redirects: raise it, or use the final URL",
                        retryable=False,
                    )
                hops_left -= 1
                url = urljoin(url, location)
                if status == 303 or (status in (301, 302) and method == "POST"):
                    method, content = "GET", None
                    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
                if _origin(url) != origin and secret is not None:
                    # The secret was given for the first origin: another origin never gets it.
                    headers = {k: v for k, v in headers.items() if k not in secret}
                    secret = None
                continue
            break
        response: JSONObject = {
            "status": status,
            "headers": _bounded_headers(got),
            "body": _decode(body, got),
        }
        if scrub:
            response = _scrubbed(response, scrub, str(auth_out.get("secret", "")) if auth_out else "")
        ok = self._judge(str(request.get("success", "response.status < 300")), response)
        if not ok:
            snippet = _snippet(response["body"])
            raise ActivityError(
                f"HttpStatus{status}",
                f"{method} {_shown(url)} answered {status} {reason}".rstrip()
                + (f": {snippet}" if snippet else ""),
                retryable=retryable_status(status),
            )
        out: JSONObject = {**response, "url": _shown(url)}
        if auth_out:
            out["auth"] = auth_out
        return out

    # --- parts -----------------------------------------------------------------------------------
    def _headers(self, request: Mapping[str, JSONValue], ctx: ActivityContext) -> dict[str, str]:
        out = {"User-Agent": USER_AGENT}
        raw = request.get("headers")
        if isinstance(raw, dict):
            for name, value in raw.items():
                text = value if isinstance(value, str) else json.dumps(value)
                if "\r" in text or "\n" in text:
                    raise ActivityError(
                        "HttpInvalidRequest",
                        f"header {name} holds a line break (header injection)",
                        retryable=False,
                    )
                out[str(name)] = text
        header = request.get("idempotency_header", "Idempotency-Key")
        if isinstance(header, str) and header and not any(k.lower() == header.lower() for k in out):
            out[header] = ctx.idempotency_key
        return out

    def _secret(
        self, request: Mapping[str, JSONValue], ctx: ActivityContext
    ) -> tuple[dict[str, str] | None, JSONObject | None, str | None]:
        """The headers that carry the secret, what the output records of it, and its clear value (to
        scrub from what the server answers)."""
        auth = request.get("auth")
        if not isinstance(auth, dict):
            return None, None, None
        name = str(auth.get("secret", ""))
        pinned = auth.get("version")
        version = pinned if isinstance(pinned, int) and not isinstance(pinned, bool) else None
        try:
            used, value = self.ports.open_secret(ctx.tenant, name, version, ctx.run_id, ctx.step_id)
        except Exception as exc:  # Refused (audited by the port), or the database is down
            code = getattr(exc, "code", "")
            retry = code in ("unavailable", "")
            raise ActivityError("SecretUnavailable", str(exc), retryable=retry) from None
        if "\r" in value or "\n" in value:
            raise ActivityError("SecretUnavailable", f"secret {name} holds a line break", retryable=False)
        recorded: JSONObject = {"secret": name, "version": used}
        if auth.get("scheme") == "header":
            return {str(auth.get("header", "X-Api-Key")): value}, recorded, value
        return {"Authorization": f"Bearer {value}"}, recorded, value

    def _send(
        self,
        hop: Hop,
        method: str,
        headers: dict[str, str],
        content: bytes | None,
        deadline: float,
        limit: int,
    ) -> tuple[int, str, dict[str, str], bytes]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout(method, hop.url)
        transport = PinnedTransport(hop, self.ssl_context)
        try:
            with (
                httpx.Client(transport=transport, timeout=httpx.Timeout(left), trust_env=False) as client,
                client.stream(method, hop.url, headers=headers, content=content) as resp,
            ):
                got = {k.lower(): v for k, v in resp.headers.items()}
                declared = got.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise _too_large(method, hop.url, limit, f"it declares {declared} bytes")
                chunks, size = [], 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise _too_large(method, hop.url, limit, "it sent more")
                    if time.monotonic() > deadline:
                        raise ActivityError(
                            "HttpTimeout", f"{method} {_shown(hop.url)}: the step's timeout passed"
                        )
                    chunks.append(chunk)
                return resp.status_code, resp.reason_phrase, got, b"".join(chunks)
        except httpx.TimeoutException:
            raise ActivityError(
                "HttpTimeout", f"{method} {_shown(hop.url)}: no answer within the step's timeout"
            ) from None
        except httpx.HTTPError as exc:
            # A dropped connection included: the server may have applied the request; the retry sends
            # the same idempotency key.
            raise ActivityError(
                "HttpConnectionError", f"{method} {_shown(hop.url)}: {type(exc).__name__}: {exc}"
            ) from None

    def _judge(self, source: str, response: JSONObject) -> bool:
        try:
            verdict = evaluate(_success(source), {"response": response})
        except ExprError as exc:
            raise ActivityError(
                "HttpSuccessError", f"the step's success expression failed: {exc}", retryable=False
            ) from None
        if not isinstance(verdict, bool):
            raise ActivityError(
                "HttpSuccessError",
                f"the step's success expression gave {verdict!r}, not true or false",
                retryable=False,
            )
        return verdict


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _content(request: Mapping[str, JSONValue]) -> tuple[bytes | None, str]:
    if "body" not in request:
        return None, ""
    body = request["body"]
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), "application/json"


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _shown(url: str) -> str:
    """The URL without its query (which may carry tokens) for messages and the output."""
    parts = urlsplit(url)
    return parts._replace(query="", fragment="").geturl() if parts.scheme else url[:200]


def _timeout(method: str, url: str) -> ActivityError:
    return ActivityError(
        "HttpTimeout", f"{method} {_shown(url)}: no complete answer within the step's timeout"
    )


def _too_large(method: str, url: str, limit: int, what: str) -> ActivityError:
    return ActivityError(
        "HttpResponseTooLarge",
        f"{method} {_shown(url)}: the response is over the step's max_response_bytes ({limit}): {what}",
        retryable=False,
    )


def _bounded_headers(got: Mapping[str, str]) -> JSONObject:
    out: JSONObject = {}
    for name, value in list(got.items())[:MAX_OUTPUT_HEADERS]:
        out[name] = value[:MAX_HEADER_CHARS]
    return out


def _decode(body: bytes, headers: Mapping[str, str]) -> JSONValue:
    if not body:
        return None
    ctype = headers.get("content-type", "").lower()
    text = body.decode("utf-8", errors="replace")
    if "json" in ctype:
        try:
            value: JSONValue = json.loads(text)
        except ValueError:
            return text
        return value
    return text


def _snippet(body: JSONValue) -> str:
    if body is None:
        return ""
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return text[:SNIPPET] + ("..." if len(text) > SNIPPET else "")


def _scrubbed(value: JSONObject, secret: str, name: str) -> JSONObject:
    """`value` with the secret's clear text replaced wherever the server echoed it (it is stored)."""
    if len(secret) < 4:
        return value
    mark = f"[secret {name}]"

    def walk(v: JSONValue) -> JSONValue:
        if isinstance(v, str):
            return v.replace(secret, mark)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k.replace(secret, mark): walk(x) for k, x in v.items()}
        return v

    out = walk(value)
    return out if isinstance(out, dict) else value
