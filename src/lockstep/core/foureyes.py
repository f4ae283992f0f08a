"""Four-eyes repairs: on a definition with `four_eyes: [skip, migrate, resolve]`, those commands do not run
at once. The first operator's command is recorded as a proposal (RepairProposed: the whole command, the
actor, the reason), after checking that it would be accepted now. A second, different operator confirms
it (RepairConfirmed, then the command runs on the state as it is at that moment, checked again), or
anyone with the operator role rejects it (RepairRejected; a withdrawal when the proposer does it).

Any event that moves the run makes an open proposal stale (evolve drops it; see KEEPS_PROPOSAL): a
confirmation never runs a command on a state other than the one its proposer looked at.
"""

from __future__ import annotations

from typing import assert_never

from .canonical import JSONObject
from .commands import ConfirmRepair, MigrateRun, Rejected, RejectRepair, ResolveStep, SkipStep
from .events import RepairConfirmed, RepairProposed, RepairRejected
from .flow import Tx
from .migrate import migrate
from .repair import resolve, skip

__all__ = ["confirm_repair", "needs_second_operator", "propose_repair", "reject_repair"]

Repair = SkipStep | ResolveStep | MigrateRun


def _kind(c: Repair) -> str:
    return "skip" if isinstance(c, SkipStep) else "resolve" if isinstance(c, ResolveStep) else "migrate"


def _run(tx: Tx, c: Repair) -> None:
    """The repair command itself (mypy checks that every kind has its case: assert_never)."""
    match c:
        case SkipStep():
            skip(tx, c)
        case ResolveStep():
            resolve(tx, c)
        case MigrateRun():
            migrate(tx, c)
        case _:
            assert_never(c)


def needs_second_operator(tx: Tx, c: Repair) -> bool:
    # A migration granted by its approvers (never the operator who asked) had its second pair of eyes.
    if isinstance(c, MigrateRun) and c.request_id is not None:
        return False
    return _kind(c) in tx.d.four_eyes


def _as_data(c: Repair) -> JSONObject:
    """The command as recorded in RepairProposed (everything needed to run it later)."""
    if isinstance(c, SkipStep):
        return {"step": c.step, "output": c.output, "roles": list(c.roles)}
    if isinstance(c, ResolveStep):
        return {"step": c.step, "outcome": c.outcome, "output": c.output}
    return {
        "to_version": c.target_version,
        "target_digest": c.target.digest,
        "mapping": [list(pair) for pair in c.mapping],
    }


def _rebuild(p: JSONObject, c: ConfirmRepair) -> Repair:
    """The proposed command, run with the proposer as its actor (the confirmer is in RepairConfirmed)."""
    cmd, reason, actor = p["command"], p["reason"], p["actor"]
    if p["kind"] == "skip":
        # The confirmer, too, must hold a role the step's skip policy names.
        return SkipStep(cmd["step"], reason, cmd["output"], actor, c.roles)
    if p["kind"] == "resolve":
        return ResolveStep(cmd["step"], cmd["outcome"], reason, cmd["output"], actor)
    if c.target is None or c.target.digest != cmd["target_digest"]:
        raise Rejected(
            "wrong_target",
            f"proposal {p['proposal_id']} migrates to version {cmd['to_version']} "
            f"(digest {cmd['target_digest'][:12]}); confirm it with that version",
        )
    mapping = tuple((str(a), str(b)) for a, b in cmd["mapping"])
    return MigrateRun(c.target, int(cmd["to_version"]), mapping, reason, actor)


def _operator(actor: str | None, what: str) -> str:
    if actor is None or not actor.strip():
        raise Rejected("operator_required", f"{what} needs a named operator (four-eyes counts people)")
    return actor


def propose_repair(tx: Tx, c: Repair) -> None:
    s = tx.s
    kind = _kind(c)
    if s.terminal:
        raise Rejected("terminal", f"the run is already {s.status}; there is nothing to {kind}")
    if not c.reason.strip():
        raise Rejected("reason_required", f"{kind} needs a reason")
    actor = _operator(c.actor, f"a four-eyes {kind}")
    if s.proposal is not None:
        p = s.proposal
        raise Rejected(
            "proposal_open",
            f"proposal {p['proposal_id']} ({p['kind']} by {p['actor']}) already awaits a second operator: "
            f"confirm or reject it first",
        )
    most = tx.limits["max_repair_proposals"]
    if s.proposals_made >= most:
        raise Rejected("too_many_proposals", f"this run already had {most} repair proposals (the limit)")
    probe = Tx(s, tx.now, tx.d, tx.limits)
    _run(probe, c)  # refused now: refused as a proposal too, with the same reason
    tx.emit(
        RepairProposed(
            proposal_id=f"p{s.seq + 1}",
            kind=kind,
            command=_as_data(c),
            reason=c.reason,
            actor=actor,
            effect=[e.type for e in probe.events],
        )
    )


def _open(tx: Tx, proposal_id: str) -> JSONObject:
    p = tx.s.proposal
    if tx.s.terminal or p is None or p["proposal_id"] != proposal_id:
        raise Rejected(
            "no_proposal",
            f"proposal {proposal_id} is not open: it was confirmed, rejected or withdrawn, or the run moved "
            f"on since it was made (a proposal holds only for the state its proposer saw): propose again",
        )
    return p


def confirm_repair(tx: Tx, c: ConfirmRepair) -> None:
    p = _open(tx, c.proposal_id)
    if not c.reason.strip():
        raise Rejected("reason_required", "confirming a proposal needs a reason")
    actor = _operator(c.actor, "confirming a proposal")
    if actor == p["actor"]:
        raise Rejected(
            "same_operator",
            f"{actor} proposed this {p['kind']}; it needs a second, different operator to confirm it",
        )
    command = _rebuild(p, c)
    tx.emit(
        RepairConfirmed(
            proposal_id=p["proposal_id"], kind=p["kind"], by=actor, reason=c.reason, proposed_by=p["actor"]
        )
    )
    _run(tx, command)  # checked again on the state as it is now


def reject_repair(tx: Tx, c: RejectRepair) -> None:
    p = _open(tx, c.proposal_id)
    if not c.reason.strip():
        raise Rejected("reason_required", "rejecting a proposal needs a reason")
    actor = _operator(c.actor, "rejecting a proposal")
    tx.emit(
        RepairRejected(
            proposal_id=p["proposal_id"],
            kind=p["kind"],
            by=actor,
            reason=c.reason,
            proposed_by=p["actor"],
            withdrawn=actor == p["actor"],
        )
    )
