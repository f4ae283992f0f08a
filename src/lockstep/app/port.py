"""What a feature service needs of the kernel: `KernelPort[X]`, the kernel's calls with its transactions
typed as `X`, the intersection of the storage protocols that the feature uses (`store/port/`).

The kernel's own transactions offer every aggregate (`Tx`), so `Kernel` is a `KernelPort` over any of
them; a feature that takes `KernelPort[ClaimTx]` can only call what `ClaimTx` offers, and mypy checks it.
Its own helpers take the narrowest protocol they use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from ..core.canonical import JSONValue
from ..core.commands import Command
from ..core.definition import Definition
from ..core.events import Event
from ..core.limits import ServerLimits, Settings
from ..core.shape import Shape
from ..core.state import RunState
from ..errors import LockstepError
from ..store import (
    ApplyTx,
    BatchTx,
    DamagedRun,
    DefinitionsTx,
    LoadedRun,
    RetentionTx,
    SealTx,
    TenantsTx,
    TxControl,
)
from .kernel import Listener, Observer

__all__ = ["Housekeeping", "KernelPort"]

TxT_co = TypeVar("TxT_co", covariant=True)
X = TypeVar("X", bound=TxControl)
T = TypeVar("T")
P = ParamSpec("P")


class Housekeeping(Protocol):
    """The store's slow maintenance, the one call a feature makes on the store itself."""

    def ensure_partitions(self) -> None: ...


class KernelPort(Protocol[TxT_co]):
    """The kernel (app/kernel.py) as a feature service sees it; see there for what each call does."""

    @property
    def clock(self) -> Callable[[], datetime]: ...
    @property
    def server_limits(self) -> ServerLimits: ...
    @property
    def listeners(self) -> list[Listener]: ...
    @property
    def observers(self) -> list[Observer]: ...
    @property
    def store(self) -> Housekeeping: ...

    def write(self) -> AbstractContextManager[TxT_co]: ...
    def read(self) -> AbstractContextManager[TxT_co]: ...
    def isolated(
        self, tx: X, what: str, fn: Callable[Concatenate[X, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T | None: ...
    def as_one_batch(
        self,
        tx: BatchTx,
        what: str,
        run_ids: Sequence[str],
        body: Callable[[dict[str, LoadedRun]], T],
        *,
        skip_locked: bool = False,
    ) -> T | None: ...

    def opened(self, tx: SealTx, tenant: str, run_id: str, value: JSONValue) -> JSONValue: ...
    def missing(self, tx: RetentionTx, run_id: str, tenant: str | None) -> LockstepError: ...
    def definition_for(self, tx: DefinitionsTx, tenant: str, name: str, version: int) -> Definition: ...
    def definition_of(self, tx: DefinitionsTx, state: RunState) -> Definition: ...
    def definition(self, tenant: str, name: str, version: int) -> Definition: ...
    def settings_of(self, tenant: str, tx: TenantsTx | None = None, *, fresh: bool = False) -> Settings: ...
    def check_value(
        self, tenant: str, value: object, size_limit: str, what: str, root: str = "value"
    ) -> Shape: ...

    def apply(
        self,
        tx: ApplyTx,
        loaded: LoadedRun | None,
        command: Command,
        now: datetime,
        definition: Definition,
        request_digest: str | None = None,
        then: Callable[[RunState, list[Event]], Command | Sequence[Command] | None] | None = None,
        lease_until: datetime | None = None,
    ) -> tuple[RunState | None, list[Event]]: ...
    def command(
        self,
        run_id: str,
        command: Command,
        tenant: str | None = None,
        prepare: Callable[[TxT_co, LoadedRun], Command] | None = None,
    ) -> tuple[RunState, list[Event]]: ...
    def state(self, tenant: str | None, run_id: str) -> RunState: ...
    def inspect(self, tenant: str | None, run_id: str) -> tuple[RunState, DamagedRun | None]: ...
