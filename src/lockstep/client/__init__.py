"""lockstep's HTTP API from Python: `Client` (sync) and `AsyncClient` (asyncio), typed answers
(`lockstep.client.types`), errors as `lockstep.errors` classes. It talks HTTP only: nothing of the
engine's database or internals is imported, so a program that uses it needs a URL and an API key.

    from lockstep.client import Client

    with Client("https://lockstep.example", api_key_file="/etc/lockstep/key") as c:
        run = c.start("order-fulfilment", {"amount": 12}, key="order-1042")
        print(c.wait(run.run_id, timeout=60).status)
"""

from .aio import AsyncClient
from .config import read_key_file
from .problems import WaitTimedOut
from .sync import Client
from .types import (
    TERMINAL,
    CancelResult,
    DeadLetter,
    DecisionResult,
    DefinitionRef,
    Event,
    EventDelivery,
    InboxItem,
    Lane,
    Link,
    MigrationPlan,
    MigrationRequest,
    MintedLink,
    Reassigned,
    RepairResult,
    RetryResult,
    RevokedLink,
    Run,
    RunPage,
    StartResult,
    Step,
    Task,
)
from .waits import WAITING_ON, settled

__all__ = [
    "TERMINAL",
    "WAITING_ON",
    "AsyncClient",
    "CancelResult",
    "Client",
    "DeadLetter",
    "DecisionResult",
    "DefinitionRef",
    "Event",
    "EventDelivery",
    "InboxItem",
    "Lane",
    "Link",
    "MigrationPlan",
    "MigrationRequest",
    "MintedLink",
    "Reassigned",
    "RepairResult",
    "RetryResult",
    "RevokedLink",
    "Run",
    "RunPage",
    "StartResult",
    "Step",
    "Task",
    "WaitTimedOut",
    "read_key_file",
    "settled",
]
