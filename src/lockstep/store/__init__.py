"""Storage: the port (what the service needs) and its adapters. Only this package speaks SQL."""

from .port import (
    ConcurrencyError,
    DefinitionRow,
    DueTimer,
    ExpiredLease,
    LoadedRun,
    RowLocked,
    SchemaError,
    Store,
    StoreUnavailable,
    TaskRow,
    TenantRow,
    Tx,
    UserRow,
    open_store,
    upgrade_store,
)

__all__ = [
    "ConcurrencyError",
    "DefinitionRow",
    "DueTimer",
    "ExpiredLease",
    "LoadedRun",
    "RowLocked",
    "SchemaError",
    "Store",
    "StoreUnavailable",
    "TaskRow",
    "TenantRow",
    "Tx",
    "UserRow",
    "open_store",
    "upgrade_store",
]
