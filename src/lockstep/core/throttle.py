"""Login throttling as arithmetic: a counter per user and per client address, and what one attempt does.

An attempt is counted when it is admitted, before its password is checked, so attempts racing each
other in many server processes cannot get past the limit: the store serialises them on the counter's
row. A success gives its count back (the user's counter is cleared, the address's decremented); a
failure keeps it. Reaching the limit locks the counter; each further lockout in a row lasts twice as
long (up to a ceiling), and a window that ends below the limit forgives the earlier lockouts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["LoginCounter", "ThrottlePolicy", "admit", "current", "expires_at", "refund"]


@dataclass(frozen=True)
class LoginCounter:
    key: str  # "user:<tenant>/<name>" or "address:<ip>"
    attempts: int
    window_start_ms: int
    locked_until_ms: int | None = None
    lockouts: int = 0


@dataclass(frozen=True)
class ThrottlePolicy:
    max_attempts: int
    window_ms: int
    lockout_ms: int
    lockout_max_ms: int


def current(c: LoginCounter, now_ms: int, p: ThrottlePolicy) -> LoginCounter:
    """The counter as of `now_ms`: an ended lockout opens a new window (its lockouts kept, so the next
    one is longer); a window that ended below the limit starts afresh and forgives earlier lockouts."""
    if c.locked_until_ms is not None:
        if now_ms < c.locked_until_ms:
            return c
        c = replace(c, attempts=0, window_start_ms=c.locked_until_ms, locked_until_ms=None)
    if now_ms - c.window_start_ms >= p.window_ms:
        return replace(c, attempts=0, window_start_ms=now_ms, lockouts=0)
    return c


def admit(c: LoginCounter, now_ms: int, p: ThrottlePolicy) -> tuple[LoginCounter, int]:
    """(the counter with this attempt counted, 0), or (the counter, milliseconds until an attempt can be
    admitted again) when it is locked. The attempt that reaches the limit is admitted and sets the lock."""
    c = current(c, now_ms, p)
    if c.locked_until_ms is not None:
        return c, c.locked_until_ms - now_ms
    c = replace(c, attempts=c.attempts + 1)
    if c.attempts >= p.max_attempts:
        lockout = min(p.lockout_ms * 2**c.lockouts, p.lockout_max_ms)
        c = replace(c, locked_until_ms=now_ms + lockout, lockouts=c.lockouts + 1)
    return c, 0


def refund(c: LoginCounter, now_ms: int, p: ThrottlePolicy) -> LoginCounter:
    """Give a successful attempt's count back; if it was the one that reached the limit, lift its lock.
    Failures are never given back, so one good login cannot buy an address more guesses."""
    c = current(c, now_ms, p)
    if c.attempts == 0:
        return c
    if c.locked_until_ms is not None and c.attempts >= p.max_attempts:
        return replace(c, attempts=c.attempts - 1, locked_until_ms=None, lockouts=max(0, c.lockouts - 1))
    return replace(c, attempts=c.attempts - 1)


def expires_at(c: LoginCounter, p: ThrottlePolicy) -> int:
    """From when on the stored counter means no more than a fresh one (it may then be deleted)."""
    return (c.locked_until_ms if c.locked_until_ms is not None else c.window_start_ms) + p.window_ms
