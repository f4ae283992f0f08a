"""The envelope of an event and its JSON codec: the only place that sees the stored form.

An `Event` is what the store keeps in one row (seq, type, at, v) around its `data`: one of the records
(union.py). The codec's rules:

- A record's fields are the keys of its stored `data` object, declared in the order the engine writes
  them (so the stored text stays what it was). A field that older builds did not write, or that is
  written only in some cases, defaults to `UNSET` and is then absent from the stored object again.
- The hash chain is computed over the stored form (`Event.to_json`, canonical JSON), so reading and
  writing an event must give back exactly the stored object. A stored object that does not fit its
  record (a field this build does not know or lacks, a value of another type) is still read; the event
  then keeps the object as read (`stored`) and is hashed and written from it, never from a guess.
- `v` is the schema version of the stored form. Every version so far is 1; one that this build does not
  know (written by a newer lockstep) is refused with a message instead of being misread.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET

from ..canonical import canonical_json, parse_json
from .record import Doc
from .union import RECORDS, EventData

__all__ = ["SCHEMA_VERSION", "Event", "chain_hash", "chain_link", "data_of"]

SCHEMA_VERSION = 1


class Event(msgspec.Struct, frozen=True, gc=False):  # see record.py for gc=False
    """One fact in its envelope. `seq` is assigned when it is appended (1-based, contiguous per run).

    `stored` is empty but for an event read from storage whose data does not fit its record (see the
    module's docstring): the data exactly as it was stored, which then stands for the event's JSON."""

    data: EventData
    at: str
    seq: int = 0
    v: int = SCHEMA_VERSION
    stored: Doc | None = None

    @property
    def type(self) -> str:
        return self.data.type

    def data_json(self) -> Doc:
        """The `data` object as stored (keys in writing order; nested values shared, not copied)."""
        if self.stored is not None:
            return self.stored
        out = msgspec.structs.asdict(self.data)
        for name in _MAYBE_ABSENT[type(self.data)]:
            if out[name] is UNSET:
                del out[name]
        return out

    def to_json(self) -> Doc:
        return {"seq": self.seq, "type": self.type, "at": self.at, "v": self.v, "data": self.data_json()}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> Event:
        """The inverse of to_json (a missing `v` is version 1, the only one before `v` was written)."""
        v = obj.get("v", 1)
        cls = _record(obj["type"], v)
        data = obj["data"]
        try:
            return Event(msgspec.convert(data, cls, strict=True), obj["at"], obj["seq"], v)
        except msgspec.ValidationError:
            return Event(_fitted(cls, data), obj["at"], obj["seq"], v, stored=data)

    @staticmethod
    def from_row(seq: int, type_: str, at: str, v: int, data: str | bytes) -> Event:
        """An event from its stored columns (the store's read path): one typed pass over the JSON."""
        cls = _record(type_, v)
        try:
            return Event(_DECODERS[cls].decode(data), at, seq, v)
        except msgspec.ValidationError:
            raw = parse_json(data)
            return Event(_fitted(cls, raw), at, seq, v, stored=raw)


_MAYBE_ABSENT = {
    cls: tuple(f.name for f in msgspec.structs.fields(cls) if f.default is UNSET) for cls in RECORDS.values()
}
_DECODERS = {cls: msgspec.json.Decoder(cls) for cls in RECORDS.values()}


def _record(type_: str, v: int) -> type[EventData]:
    if not isinstance(v, int) or not 1 <= v <= SCHEMA_VERSION:
        raise ValueError(
            f"{type_} event of schema version {v!r}: this lockstep reads versions 1..{SCHEMA_VERSION}"
            " (was it written by a newer lockstep?)"
        )
    cls = RECORDS.get(type_)
    if cls is None:
        raise ValueError(f"unknown event type {type_!r}")
    return cls


def _fitted(cls: type[EventData], data: object) -> EventData:
    """A record from data that does not fit it: the fields it has, unchecked; the others UNSET."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.type} event data is not a JSON object")
    return cls(**{f: data.get(f, UNSET) for f in cls.__struct_fields__})


def data_of(type_: str, data: Mapping[str, Any], v: int = SCHEMA_VERSION) -> EventData:
    """The record of one event's data as JSON (for what reads events through a view, as the CLI does)."""
    return Event.from_json({"type": type_, "data": data, "at": "", "seq": 0, "v": v}).data


def chain_link(previous: str, run_id: str, event: Mapping[str, Any]) -> str:
    """sha256 over the previous hash and one event's stored form (to_json): editing or removing any event
    breaks the chain."""
    body = canonical_json({"run": run_id, **event})
    return hashlib.sha256((previous + "\n" + body).encode()).hexdigest()


def chain_hash(previous: str, run_id: str, event: Event) -> str:
    return chain_link(previous, run_id, event.to_json())
