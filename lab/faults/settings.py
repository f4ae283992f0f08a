"""The faults the fake payment API injects, as `POST /control` sets them: a delay before answering, and the
rates of failures before applying anything and of responses dropped after the effect was applied. Random
draws come from one seeded generator, so a run is reproducible for a given seed and request order."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Mapping
from typing import Any, cast

__all__ = ["FaultSettings"]


class FaultSettings:
    """The injected faults, shared by every handler thread; one seeded generator behind a lock."""

    FIELDS = ("delay_ms", "fail_rate", "drop_rate", "seed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delay_ms = 0
        self.fail_rate = 0.0
        self.drop_rate = 0.0
        self.seed = 0
        self._rng = random.Random(0)  # noqa: S311 - fault injection, not security

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {name: getattr(self, name) for name in self.FIELDS}

    def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Apply any subset of delay_ms / fail_rate / drop_rate / seed (`reset: true` first restores
        the defaults); everything is validated before anything changes. ValueError on bad input."""
        unknown = sorted(set(changes) - {*self.FIELDS, "reset"})
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(unknown)}")
        reset = changes.get("reset", False)
        if not isinstance(reset, bool):
            raise ValueError("reset must be true or false")
        delay = changes.get("delay_ms")
        if delay is not None and (not _is_int(delay) or delay < 0):
            raise ValueError("delay_ms must be an integer >= 0")
        for name in ("fail_rate", "drop_rate"):
            rate = changes.get(name)
            if rate is not None and not (_is_number(rate) and 0.0 <= rate <= 1.0):
                raise ValueError(f"{name} must be a number between 0 and 1")
        seed = changes.get("seed")
        if seed is not None and not _is_int(seed):
            raise ValueError("seed must be an integer")
        with self._lock:
            if reset:
                self.delay_ms, self.fail_rate, self.drop_rate, self.seed = 0, 0.0, 0.0, 0
                self._rng.seed(0)
            if delay is not None:
                self.delay_ms = int(delay)
            if changes.get("fail_rate") is not None:
                self.fail_rate = float(changes["fail_rate"])
            if changes.get("drop_rate") is not None:
                self.drop_rate = float(changes["drop_rate"])
            if seed is not None:
                # Setting a seed (even the same one) restarts the sequence: a scenario can replay it.
                self.seed = int(seed)
                self._rng.seed(self.seed)
        return self.snapshot()

    def draw(self) -> tuple[bool, bool]:
        """(fail, drop) for one request. Both draws are always taken, so the sequence of outcomes for
        a seed does not shift when a rate changes between scenarios' phases."""
        with self._lock:
            fail = self._rng.random() < self.fail_rate
            drop = self._rng.random() < self.drop_rate
        return fail, drop


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(cast(float, value))
