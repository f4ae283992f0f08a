"""evolve(state, event) -> state, and fold(events): how each event changes a run's state.

evolve never consults the definition: every event carries what it means, so a history replays alone.
fold.py checks what every event must satisfy and dispatches on the event's group, a `match` that mypy
checks is exhaustive (assert_never); each group's function, a `match` over its records checked the same
way, is in the module of that name, as in lockstep.core.events: run.py, attempts.py, timers.py,
approvals.py, repairs.py. copying.py copies the state with a few fields changed.
"""

from __future__ import annotations

from .fold import evolve, fold

__all__ = ["evolve", "fold"]
