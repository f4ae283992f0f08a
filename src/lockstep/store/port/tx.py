"""`TxControl`: how several writes of one transaction go together (a batch of appends whose checks run at
the end, a savepoint). Apart from the aggregates because it belongs to the transaction, not to a table;
the callers that batch (BatchTx, ClaimTx, SweepTx in compose.py) take it beside their aggregates."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["TxControl"]


class TxControl(Protocol):
    def batch(self) -> AbstractContextManager[None]:
        """Several appends' writes in one round trip; their checks run (and may fail) at the end."""
        ...

    def savepoint(self) -> AbstractContextManager[None]: ...
