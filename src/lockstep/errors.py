"""Errors a user of the engine sees: each says what went wrong, where, and how to fix it."""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Forbidden",
    "Gone",
    "InvalidInput",
    "LockstepError",
    "NotFound",
    "RateLimited",
    "Refused",
    "Unauthenticated",
    "Unavailable",
]


class LockstepError(Exception):
    """Base class; `code` is stable for machines, the message is one line for people."""

    code = "error"
    exit_code = 1

    def __init__(
        self, message: str, *, code: str | None = None, extra: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        if code:
            self.code = code
        # Extension members for the HTTP problem document (e.g. the original decision of a replay).
        self.extra = extra or {}


class InvalidInput(LockstepError):
    code = "invalid_input"
    exit_code = 2


class NotFound(LockstepError):
    code = "not_found"
    exit_code = 3


class Conflict(LockstepError):
    code = "conflict"
    exit_code = 4


class Refused(LockstepError):
    """The state machine refused the command (e.g. cancelling a finished run); nothing was written."""

    code = "refused"
    exit_code = 5


class Unavailable(LockstepError):
    code = "unavailable"
    exit_code = 6


class Unauthenticated(LockstepError):
    code = "unauthenticated"
    exit_code = 7


class Forbidden(LockstepError):
    code = "forbidden"
    exit_code = 7


class RateLimited(LockstepError):
    """Over a tenant limit; `retry_after` seconds says when trying again can succeed."""

    code = "rate_limited"
    exit_code = 8

    def __init__(self, message: str, *, retry_after: float, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class Gone(LockstepError):
    """Something that existed is no longer usable (an expired or revoked link)."""

    code = "gone"
    exit_code = 9
