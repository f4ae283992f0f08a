"""Naming a run the way people remember it: its id, the start of its id, or the start key it was
started with (`order-42`). The CLI resolves what it is given here, so `lockstep show 01a23c` and
`lockstep show order-42` find the run `lockstep start ... --key order-42` printed."""

from __future__ import annotations

import re

from ..errors import InvalidInput, NotFound
from ..store import StartTx
from .port import KernelPort

__all__ = ["MIN_PREFIX", "RunRefs"]

_FULL_ID = re.compile(r"^[0-9a-f]{32}$")
_HEX = re.compile(r"^[0-9a-f]+$")
# Shorter prefixes of time-ordered ids match nearly every run of the same hour: not worth a lookup.
MIN_PREFIX = 6
_SHOWN = 5


class RunRefs:
    def __init__(self, kernel: KernelPort[StartTx]) -> None:
        self.kernel = kernel

    def resolve(self, tenant: str, ref: str) -> str:
        """The run id `ref` names in `tenant`: a full id as given; else the run started with the start
        key `ref`; else the one run whose id begins with `ref`. NotFound or InvalidInput say why not."""
        if _FULL_ID.match(ref):
            return ref  # the command itself answers for a run that does not exist
        with self.kernel.read() as tx:
            found = tx.run_by_key(tenant, ref)
            if found is not None:
                return found[0]
            lowered = ref.lower()
            ids = (
                tx.runs_with_prefix(tenant, lowered, _SHOWN + 1)
                if len(lowered) >= MIN_PREFIX and _HEX.match(lowered)
                else []
            )
        if len(ids) == 1:
            return ids[0]
        if ids:
            more = ", ..." if len(ids) > _SHOWN else ""
            raise InvalidInput(
                f"run id prefix {ref} matches several runs of tenant {tenant} ({', '.join(ids[:_SHOWN])}"
                f"{more}): give more of the id"
            )
        short = (
            f" (an id prefix needs at least {MIN_PREFIX} hex digits)"
            if _HEX.match(ref.lower()) and len(ref) < MIN_PREFIX
            else ""
        )
        raise NotFound(
            f"no run {ref} in tenant {tenant}: it is neither a run id, the start of one{short}, nor a "
            f"start key (`lockstep runs` lists the runs)"
        )
