"""Which steps of a finished run were never entered: `not_taken` in every view of the run.

A step the run never entered stays `pending` in the state. Once the run is over that is misleading (it
will never run), so the views say `not_taken`; while the run goes on it is still to come and stays
`pending`. One kind of step needs a closer look: a `succeed` step ends the run (or its lane) without an
event of its own, so it stays pending even when the run ended there. It was entered when a step before
it in its list left towards it: a choice whose recorded output names it, or a finished step whose `next`
(or the order of the list) leads to it.
"""

from __future__ import annotations

from ..core.definition.flowgraph import edges_of
from ..core.definition.model import Definition
from ..core.definition.shapes import step_lists
from ..core.paths import lane_of, qualify, step_id
from ..core.state import TERMINAL, RunState

__all__ = ["NOT_TAKEN", "settled"]

NOT_TAKEN = "not_taken"
_LEFT = frozenset({"succeeded", "skipped"})  # a step the run left along its way out


def _ways_in(d: Definition) -> dict[str, list[tuple[str, str]]]:
    """For each step id, the steps of its list that lead to it: (source id, how)."""
    into: dict[str, list[tuple[str, str]]] = {}
    for _owner, steps in step_lists(d.steps):
        ids = [s.id for s in steps]
        for i, s in enumerate(steps):
            for e in edges_of(s, ids[i + 1] if i + 1 < len(ids) else "(end)"):
                into.setdefault(e.target, []).append((s.id, e.via))
    return into


def settled(d: Definition | None, s: RunState) -> dict[str, str]:
    """The status views show for the steps of `s`'s finished run that are still `pending` in its state:
    `not_taken`, or `succeeded` for the succeed step the run (or a lane) ended at. Empty while the run
    goes on."""
    if s.status not in TERMINAL:
        return {}
    into = _ways_in(d) if d is not None else {}
    out = {}
    for key, st in s.steps.items():
        if st.status != "pending" or st.started_at:
            continue
        sid, lane = step_id(key), lane_of(key)
        ends = d is not None and d.has_step(key) and d.step(key).kind == "succeed"
        ways = into.get(sid, [])
        entered = ends and any(_entered_from(s, qualify(lane, src), via, sid) for src, via in ways)
        out[key] = "succeeded" if entered else NOT_TAKEN
    return out


def _entered_from(s: RunState, source: str, via: str, target: str) -> bool:
    st = s.steps.get(source)
    if st is None or st.status not in _LEFT:
        return False
    if via.startswith("choice[") or via == "else":
        return isinstance(st.output, dict) and st.output.get("next") == target
    return via in ("next", "in order")
