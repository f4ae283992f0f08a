"""What every event record is built on: a frozen msgspec.Struct whose fields are the keys of the stored
`data` object (see codec.py for the rules), and the names for what records hold as arbitrary JSON.

Each group of records (one module) has two names: a base class (`AttemptRecord`), by which one `case`
matches the whole group, and the union of its records (`AttemptEvent`), against which mypy checks that a
`match` over the group covers every record. mypy also checks that the two agree: a record of the base
missing from the union is an argument of the wrong type where a group's records are handed on."""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

import msgspec

__all__ = ["JSON", "Doc", "Record"]

# What the records hold that is arbitrary JSON: run inputs and outputs, activity payloads, and the
# nested documents (errors, policies, definitions, deferred transitions) that evolve copies into the
# state as they are.
JSON: TypeAlias = Any
Doc: TypeAlias = dict[str, Any]


# gc=False (here and on Event): records and envelopes hold only JSON values, which never refer back to
# them, so they cannot be part of a reference cycle; untracked, the thousands a worker or scheduler
# creates per second do not trigger or lengthen the cyclic collector's passes.
class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One kind of fact. Its tag `type` is a class attribute (stored in its own column), not a field."""

    type: ClassVar[str]
