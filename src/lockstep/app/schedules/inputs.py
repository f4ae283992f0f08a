"""A schedule's input at rest: its sensitive values sealed like a run's, under a key of the schedule's own.

The input is kept until the schedule is deleted and starts a run at every slot, so it is sealed where
the definition declares the run input sensitive (`x-lockstep-sensitive`, `sensitive_input`): each such
value is stored as a marker (core/sealed.py) under a data key made for the schedule by the key ring
(app/keys), in `run_keys` under the id `schedule:<schedule id>`: rotation re-wraps it like a run's key,
and shredding the tenant destroys it. At a slot the input is opened inside the firing transaction and
handed to the run's start, which seals it again under the new run's own key. Deleting the schedule
destroys its key (the row says so), so a copy of the database taken later cannot open the input.

A schedule that follows the latest version is checked again at every slot: when that version declares
more of the input sensitive, the newly sensitive values are sealed in the same transaction.
"""

from __future__ import annotations

from ...core.canonical import JSONValue
from ...core.definition import Definition
from ...core.sealed import FORGOTTEN, SENSITIVE, contains_marker, label_of, map_markers, redaction
from ...core.sensitive import get_at, replace_at
from ...core.timeutil import iso
from ...errors import Refused
from ...store import ScheduleRow, ScheduleTx, Sealer, SealTx
from ..port import KernelPort

__all__ = ["InputSeal", "key_id", "redacted"]

LABEL = "Schedule"


def key_id(schedule_id: str) -> str:
    """The id of the schedule's data key in `run_keys` (never a run id: those are hex only)."""
    return f"schedule:{schedule_id}"


def redacted(value: JSONValue, forgotten: bool = False) -> JSONValue:
    """The input as views show it: each sealed value replaced by its redaction marker."""
    kind = FORGOTTEN if forgotten else SENSITIVE
    return map_markers(value, lambda _m: redaction(kind))


def _sensitive(value: JSONValue, pointers: tuple[str, ...]) -> list[tuple[str, JSONValue]]:
    """(pointer, value) of each declared place that holds a clear value (not null, not sealed yet)."""
    out = []
    for p in pointers:
        try:
            found = get_at(value, p)
        except KeyError:
            continue
        if found is not None and not contains_marker(found):
            out.append((p, found))
    return out


class InputSeal:
    def __init__(self, kernel: KernelPort[ScheduleTx], sealer: Sealer | None) -> None:
        self.kernel = kernel
        self.sealer = sealer

    def seal(self, tx: SealTx, tenant: str, schedule_id: str, value: JSONValue, d: Definition) -> JSONValue:
        """`value` with every value `d` declares sensitive sealed (the same object if there is none)."""
        found = _sensitive(value, d.sensitivity.input)
        if not found:
            return value
        if self.sealer is None:  # pragma: no cover - the service always passes its key ring
            raise Refused("this process cannot seal sensitive values (no key ring)", code="no_key")
        labels = [(label_of(LABEL, "/input" + p), v) for p, v in found]
        markers = self.sealer.seal(tx, tenant, key_id(schedule_id), labels)
        out = value
        for (p, _v), marker in zip(found, markers, strict=True):
            out = replace_at(out, p, marker)
        return out

    def for_start(self, tx: ScheduleTx, row: ScheduleRow) -> tuple[JSONValue, JSONValue]:
        """(the input as it is to be stored, the input in clear) for a run of `row` starting now: what
        the version to be started declares sensitive is sealed first (a newer version may declare
        more). A definition gone is left to the start, which refuses it with its reason."""
        found = tx.definition(row.tenant, row.definition, row.version)
        stored = row.input
        if found is not None:
            d = self.kernel.definition_for(tx, row.tenant, row.definition, found.version)
            stored = self.seal(tx, row.tenant, row.id, row.input, d)
        return stored, self.open(tx, row.tenant, row.id, stored)

    def open(self, tx: SealTx, tenant: str, schedule_id: str, value: JSONValue) -> JSONValue:
        """The input in clear, for the run a slot starts; Refused if its key was destroyed."""
        if not contains_marker(value):
            return value
        row = tx.run_key(key_id(schedule_id))
        if row is None or row.wrapped is None:
            raise Refused(
                "the schedule's sealed input can no longer be opened: its key was destroyed (the tenant "
                "was shredded); delete the schedule, or create it again with a new input",
                code="input_key_destroyed",
            )
        return self.kernel.opened(tx, tenant, key_id(schedule_id), value)

    def forget(self, tx: SealTx, tenant: str, schedule_id: str) -> None:
        """Destroy the schedule's key (when it is deleted): its input can never be opened again."""
        if tx.run_key(key_id(schedule_id)) is not None:
            tx.forget_run_key(key_id(schedule_id), tenant, iso(self.kernel.clock()))

    def forgotten(self, tx: SealTx, schedule_id: str) -> bool:
        row = tx.run_key(key_id(schedule_id))
        return row is not None and row.wrapped is None
