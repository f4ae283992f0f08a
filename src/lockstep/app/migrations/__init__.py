"""Migrations that need approval (part of the application service layer).

    requests.py   `migrate` of a run or a batch makes one pending request; reading requests; inbox items
    decide.py     an approver's decision by request id, with the checks of an approval request's
    apply.py      a granted request applied, one command (and outcome row) per run; the scheduler's pass
    expiry.py     a request past its time expires, nothing migrated

`Migrations` is the one object the entry points use: each call is its part's own bound method.
"""

from __future__ import annotations

from ...store import MigrateTx
from ..port import KernelPort
from .apply import MigrationApply
from .decide import MigrationDecisions
from .requests import MigrationRequests, is_migration_request

__all__ = ["Migrations", "is_migration_request"]


class Migrations:
    def __init__(self, kernel: KernelPort[MigrateTx]) -> None:
        requests = MigrationRequests(kernel)
        applier = MigrationApply(kernel)
        decisions = MigrationDecisions(kernel, requests, applier)
        self.ask = requests.ask
        self.request = requests.request
        self.open_request_of = requests.open_request_of
        self.requests = requests.requests
        self.inbox = requests.inbox
        self.decide = decisions.decide
        self.apply = applier.apply
        self.run_pass = applier.run_pass
