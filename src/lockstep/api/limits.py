"""Request limits for every HTTP route, checked before the app (FastAPI, pydantic) sees a byte.

A body over max_request_bytes is refused with 413 as soon as its Content-Length says so, or as soon as
the chunks streamed so far (chunked bodies have no length) add up to more: it is never read whole. A
JSON body (or one without a content type, which FastAPI reads as JSON) nested deeper than
max_request_depth is refused with 422 after a scan of its bytes, before any parser recurses into it.
Both are RFC 9457 problem documents. The tenant's own, tighter bounds on values come later, in the
service (core/limits.py has them all).
"""

from __future__ import annotations

import anyio.to_thread
from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.limits import ServerLimits
from ..core.shape import text_depth_over
from .problems import problem

__all__ = ["RequestLimits", "install"]

# Bodies larger than this are scanned in a worker thread: the event loop serves other requests meanwhile.
SCAN_INLINE_BYTES = 256 * 1024


def install(app: FastAPI, limits: ServerLimits) -> None:
    """Put the limits in front of `app`: max_request_bytes and max_request_depth as the server is
    configured (`Service.server_limits`)."""
    app.add_middleware(RequestLimits, limits=limits)


def _is_json(headers: Headers) -> bool:
    kind = headers.get("content-type")
    if kind is None:
        return True  # FastAPI parses a body without a content type as JSON
    media = kind.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class RequestLimits:
    def __init__(self, app: ASGIApp, limits: ServerLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        max_bytes = self.limits["max_request_bytes"]
        length = headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            await self._too_large(scope, receive, send, f"{int(length)} bytes", max_bytes)
            return
        if (length is None or length.strip() in ("", "0")) and "transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                await self._too_large(scope, receive, send, f"more than {max_bytes} bytes", max_bytes)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(headers) and not await self._json_ok(scope, receive, send, body):
            return
        await self.app(scope, _replay(body, receive), send)

    async def _json_ok(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> bool:
        path = scope.get("path")
        if b"\0" in body:  # UTF-16/32 text: JSON between systems is UTF-8 (RFC 8259)
            refusal = problem(422, "invalid_request", "a JSON body must be UTF-8 text", path)
            await refusal(scope, receive, send)
            return False
        depth = self.limits["max_request_depth"]
        if len(body) <= SCAN_INLINE_BYTES:
            over = text_depth_over(body, depth)
        else:
            over = await anyio.to_thread.run_sync(text_depth_over, body, depth)
        if over:
            detail = (
                f"the JSON body nests arrays/objects deeper than {depth} levels (max_request_depth); "
                "no tenant accepts a value nested deeper than max_json_depth (at most 64): flatten it"
            )
            response = problem(422, "too_deep", detail, path, extra={"limit": "max_request_depth"})
            await response(scope, receive, send)
            return False
        return True

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, found: str, allowed: int) -> None:
        detail = (
            f"the request body is {found}, over this server's limit max_request_bytes={allowed}; "
            "send less (a run's input is bounded much lower, by its tenant's max_input_bytes)"
        )
        extra = {"limit": "max_request_bytes", "allowed": allowed}
        await problem(413, "too_large", detail, scope.get("path"), extra=extra)(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body read here, then passes on (e.g. the disconnect)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
