"""Definitions as data: the frozen model (`model`), the parser from a YAML/JSON document (`parse`, with
one parser per kind of step in `parse_steps`, parallel and for-each steps and the checks of the shape as
a whole in `shapes`) and the publish-time checks they share (`checks`).

Import from here: `from lockstep.core.definition import Definition, parse_definition`.
"""

from .migration import MigrationApproval
from .model import (
    ActivityStep,
    ApprovalStep,
    Branch,
    ChoiceStep,
    Compensation,
    Definition,
    DefinitionError,
    FailStep,
    ForEachStep,
    HttpStep,
    Limits,
    ParallelStep,
    RetryPolicy,
    RunStep,
    Step,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)
from .parse import parse_definition
from .parse_http import HTTP_ACTIVITY

__all__ = [
    "HTTP_ACTIVITY",
    "ActivityStep",
    "ApprovalStep",
    "Branch",
    "ChoiceStep",
    "Compensation",
    "Definition",
    "DefinitionError",
    "FailStep",
    "ForEachStep",
    "HttpStep",
    "Limits",
    "MigrationApproval",
    "ParallelStep",
    "RetryPolicy",
    "RunStep",
    "Step",
    "SucceedStep",
    "WaitEventStep",
    "WaitStep",
    "parse_definition",
]
