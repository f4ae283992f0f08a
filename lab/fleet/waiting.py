"""Synchronisation for drivers: poll with a deadline. A fixed sleep only ever stands for "let time pass"
(a lease running out), never for "until something happened"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", interval: float = 0.02
) -> T:
    """Poll `predicate` until it returns something truthy (returned); raise TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {value!r})")
        time.sleep(interval)
