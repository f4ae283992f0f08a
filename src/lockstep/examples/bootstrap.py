"""`lockstep serve --example`: a tenant, a login, the example processes and a few runs to click through."""

from __future__ import annotations

import contextlib
import os
from importlib import resources
from typing import Any

from ..engine import Engine
from ..errors import Conflict
from .activities import LEDGER_ENV

__all__ = ["EXAMPLE_PASSWORD", "bootstrap"]

# A known password for a local example only (documented); real users set theirs with set-password.
EXAMPLE_PASSWORD = "lockstep-example"  # noqa: S105
RUNS: list[tuple[str, str, dict[str, Any]]] = [
    ("order-fulfilment", "example-order-1", {"order_id": "E-1", "sku": "lamp", "qty": 1, "amount": 30.0}),
    ("order-fulfilment", "example-order-2", {"order_id": "E-2", "sku": "chair", "qty": 12, "amount": 480.0}),
    (
        "order-fulfilment",
        "example-order-3",
        {"order_id": "E-3", "sku": "desk", "qty": 2, "amount": 250.0, "fail_times": 9},
    ),
    ("vendor-onboarding", "example-vendor-1", {"vendor": "Acme Tools"}),
    ("vendor-onboarding", "example-vendor-2", {"vendor": "Globex"}),
    ("purchase-order", "example-po-1", {"po": "PO-1001", "amount": 1250.0}),
    (
        "contract-review",
        "example-contract-1",
        {
            "contract": "C-77",
            "lines": [{"sku": "lamp", "qty": 4}, {"sku": "desk", "qty": 2}, {"sku": "chair", "qty": 8}],
        },
    ),
]
# Approvers for the purchase-order example; they log in with the same example password.
APPROVERS = [
    ("alice", ["approver"], ["managers"]),
    ("bob", ["approver"], ["managers"]),
    ("carol", ["approver", "viewer"], ["finance"]),
    ("dana", ["approver"], ["legal"]),  # the contract review's legal approver
]


def bootstrap(engine: Engine, ledger_dir: str) -> dict[str, Any]:
    """Idempotent: running it twice creates nothing new."""
    os.environ.setdefault(LEDGER_ENV, os.path.join(ledger_dir, "example-ledger.db"))
    principals = engine.service.principals
    created: dict[str, Any] = {"tenant": "default", "user": "admin", "password": EXAMPLE_PASSWORD}
    with contextlib.suppress(Conflict):
        principals.create_tenant("default")
    try:
        created["api_key"] = principals.create_user("default", "admin", ["admin"], ["managers"]).api_key
        principals.set_password("default", "admin", EXAMPLE_PASSWORD)
    except Conflict:
        created["password"] = "(unchanged: the admin user already existed)"  # noqa: S105
    for user, roles, groups in APPROVERS:
        with contextlib.suppress(Conflict):
            principals.create_user("default", user, roles, groups)
            principals.set_password("default", user, EXAMPLE_PASSWORD)
    for name in (
        "order-fulfilment.yaml",
        "vendor-onboarding.yaml",
        "purchase-order.yaml",
        "contract-review.yaml",
    ):
        engine.publish(resources.files("lockstep.examples").joinpath(name).read_text())
    created["runs"] = [engine.start(d, input=payload, key=key, actor="example") for d, key, payload in RUNS]
    return created
