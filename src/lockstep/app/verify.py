"""`lockstep verify` of one run: its events replayed and compared with its snapshot, its sequence numbers
and hash chain checked, every problem named precisely (the run, the seq, what is wrong). A damaged row
(one that no longer decodes) is a problem of that run, reported like the others, never a crash of the
whole check. A run the background scrub marked damaged (app/scrub.py) is checked all the same."""

from __future__ import annotations

from ..core.canonical import canonical_json
from ..core.events import Event, chain_hash
from ..core.evolve import fold
from ..store import CorruptRow, DamagedRun, LoadedRun, StartTx
from .port import KernelPort
from .views import VerifyResult

__all__ = ["verify_run"]

GENESIS = "0" * 64  # the hash before a run's first event (store/sqltx/base.py)


def verify_run(
    kernel: KernelPort[StartTx], run_id: str, tenant: str | None, *, live: bool = False
) -> VerifyResult:
    """One run checked; problems listed, never raised (except NotFound/Gone for an absent run).
    `live` (the scrub, while commands go on): events appended after the snapshot was read are not
    compared with it, as they are newer than it, not damage."""
    problems: list[str] = []
    loaded: LoadedRun | None = None
    marked: str | None = None
    rows: list[tuple[Event, str]] | None = None
    with kernel.read() as tx:
        try:
            loaded = tx.load_run(run_id)
        except DamagedRun as exc:  # checked all the same: what is wrong with it now
            loaded, marked = exc.loaded, exc.problem
        except CorruptRow as exc:  # caught inside the transaction: the kernel would make it a Refused
            problems.append(str(exc))
        if loaded is None and not problems:
            raise kernel.missing(tx, run_id, tenant)  # Gone if purged, else NotFound
        if loaded is not None and tenant is not None and loaded.stored.tenant != tenant:
            raise kernel.missing(tx, run_id, tenant)
    with kernel.read() as tx:
        try:
            rows = tx.events(run_id)
        except CorruptRow as exc:
            problems.append(str(exc))
    if rows is None:
        return VerifyResult(run_id=run_id, events=0, ok=False, problems=problems)
    if live and loaded is not None:
        rows = [(e, h) for e, h in rows if e.seq <= loaded.stored.seq]
    h = GENESIS
    for i, (e, stored) in enumerate(rows):
        if e.seq != i + 1:
            problems.append(f"sequence gap: event #{i + 1} has seq {e.seq}")
        h = chain_hash(h, run_id, e)
        if h != stored:
            problems.append(f"hash chain broken at seq {e.seq} ({e.type}): its stored bytes were changed")
            h = stored
    if loaded is None:
        return VerifyResult(run_id=run_id, events=len(rows), ok=False, problems=problems)
    if h != loaded.last_hash:
        problems.append("the run's last hash does not match its last event")
    try:
        replayed = fold([e for e, _ in rows])
    except ValueError as exc:
        problems.append(f"replay failed: {exc}")
        replayed = None
    # Both sides as stored: sealed values are compared as their markers, so verify needs no key.
    if replayed is not None and canonical_json(replayed.to_json()) != canonical_json(loaded.stored.to_json()):
        diff = [k for k, v in replayed.to_json().items() if loaded.stored.to_json().get(k) != v]
        problems.append(f"snapshot differs from replay in: {', '.join(diff)}")
    if marked is not None and not problems:
        problems.append(
            f"marked damaged by the background scrub ({marked}), but its rows check out now (restored "
            'from a backup?): clear the mark to let it run again (docs/operations.md, "Damaged runs")'
        )
    return VerifyResult(run_id=run_id, events=len(rows), ok=not problems, problems=problems)
