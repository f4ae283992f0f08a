"""The API's errors as lockstep.errors classes: a problem document (RFC 9457) becomes the error class
its status stands for, with the server's `detail` as the message and its `code`; a server that cannot be
reached becomes `Unavailable`. A caller never sees an httpx exception for an HTTP error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidInput,
    LockstepError,
    NotFound,
    RateLimited,
    Refused,
    Unauthenticated,
    Unavailable,
)

__all__ = ["WaitTimedOut", "error_of", "unreachable"]


class WaitTimedOut(LockstepError):
    """`wait()` gave up: the run did not end (or start waiting) within the timeout."""

    code = "wait_timed_out"
    exit_code = 6


_BY_STATUS: dict[int, type[LockstepError]] = {
    400: InvalidInput,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: InvalidInput,
    415: InvalidInput,
    422: InvalidInput,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def _problem(body: bytes) -> dict[str, Any] | None:
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def error_of(status: int, body: bytes, headers: Mapping[str, str], where: str) -> LockstepError:
    """The error for an HTTP answer `status` with `body` to the request `where` (METHOD URL)."""
    doc = _problem(body)
    if doc is None or not isinstance(doc.get("detail"), str):
        text = body[:200].decode("utf-8", "replace").strip()
        message = f"{where} answered HTTP {status} without a problem document" + (f": {text}" if text else "")
        doc, code = {"status": status}, None
    else:
        message = str(doc["detail"])
        code = doc.get("code") if isinstance(doc.get("code"), str) else None
    extra = {**doc, "status": status}
    if status == 429:
        try:
            retry_after = float(headers.get("retry-after", "1"))
        except ValueError:
            retry_after = 1.0
        error: LockstepError = RateLimited(message, retry_after=retry_after, code=code)
        error.extra = extra
        return error
    cls = _BY_STATUS.get(status)
    if cls is Conflict and (code == "refused" or doc.get("refused") is True):
        cls = Refused
    if cls is None:
        cls = Unavailable if status >= 500 else LockstepError
        if status >= 500 and code is None:
            code = "server_error"
    return cls(message, code=code, extra=extra)


def unreachable(where: str, exc: Exception) -> Unavailable:
    """A request that got no answer (refused connection, timeout, broken TLS): try again later."""
    reason = str(exc) or type(exc).__name__
    return Unavailable(f"no answer from {where}: {reason}", code="unreachable")
