"""The names of steps and lanes inside parallel and for-each steps (pure string grammar, no state).

A run's steps are keyed in its state (and in every event's `step`) by their *key*: a top-level step by
its id, a step inside a shape by the *lane* it runs in and its id. A lane is one line of steps that runs
beside others: a branch of a parallel step (`<parallel key>.<branch id>`) or one item of a for-each step
(`<for_each key>[<index>]`). Step and branch ids never contain `.`, `[` or `]`, so a key says by itself
which lane it is in and which shape step that lane belongs to; `evolve` needs nothing else.

    review                    top-level step (the root lane, "")
    review.legal.check        step `check` in branch `legal` of parallel step `review`
    lines[2].pack             step `pack` for item 2 of for-each step `lines`
    lines[2].review.legal.ok  nested: a parallel inside a for-each body
"""

from __future__ import annotations

__all__ = [
    "ROOT",
    "branch_lane",
    "in_step",
    "is_item_lane",
    "item_lane",
    "lane_name",
    "lane_of",
    "lane_step",
    "qualify",
    "related",
    "step_id",
    "within",
]

ROOT = ""  # the lane of the top-level steps


def qualify(lane: str, step: str) -> str:
    """The key of step id `step` in `lane`."""
    return f"{lane}.{step}" if lane else step


def step_id(key: str) -> str:
    """The definition's step id of a key (ids are unique across a definition, nested ones included)."""
    return key[key.rfind(".") + 1 :]


def lane_of(key: str) -> str:
    """The lane a step key runs in (ROOT for a top-level step)."""
    i = key.rfind(".")
    return key[:i] if i >= 0 else ROOT


def branch_lane(parallel_key: str, branch: str) -> str:
    return f"{parallel_key}.{branch}"


def item_lane(for_each_key: str, index: int) -> str:
    return f"{for_each_key}[{index}]"


def is_item_lane(lane: str) -> bool:
    return lane.endswith("]")


def lane_step(lane: str) -> str:
    """The key of the shape step (parallel or for-each) a lane belongs to."""
    if is_item_lane(lane):
        return lane[: lane.rfind("[")]
    return lane[: lane.rfind(".")]


def lane_name(lane: str) -> str:
    """The branch id, or the item index as text."""
    if is_item_lane(lane):
        return lane[lane.rfind("[") + 1 : -1]
    return lane[lane.rfind(".") + 1 :]


def within(lane: str, outer: str) -> bool:
    """`lane` is `outer` or runs inside it (a lane of a shape step somewhere in `outer`)."""
    return outer in (ROOT, lane) or lane.startswith(outer + ".")


def in_step(lane: str, key: str) -> bool:
    """`lane` is a lane of shape step `key`, or runs inside one."""
    return lane.startswith(key + ".") or lane.startswith(key + "[")


def related(a: str, b: str) -> bool:
    """One lane contains the other: their steps run one after the other, never side by side."""
    return within(a, b) or within(b, a)
