"""When `wait()` returns, and how often it asks meanwhile: a bounded, growing interval."""

from __future__ import annotations

from .types import Run

__all__ = ["WAITING_ON", "Backoff", "settled"]

# What a run can wait for that only someone outside the engine ends: a person's approval, an external
# event, an operator's repair, a pause. wait() returns then too, since waiting longer changes nothing.
WAITING_ON = frozenset({"approval", "event", "attention", "paused"})


def settled(run: Run) -> bool:
    """Whether `run` ended, or waits on something outside the engine (WAITING_ON)."""
    return run.terminal or run.wait_kind in WAITING_ON


class Backoff:
    """Intervals from `first` growing by half each time up to `most` seconds, never past `deadline`."""

    def __init__(self, first: float = 0.1, most: float = 2.0) -> None:
        self.next = first
        self.most = most

    def delay(self, left: float) -> float:
        d = min(self.next, max(0.0, left))
        self.next = min(self.next * 1.5, self.most)
        return d
