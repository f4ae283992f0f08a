"""Definitions as data: the frozen model (`model`), the parser from a YAML/JSON document (`parse`, with
one parser per kind of step in `parse_steps`) and the publish-time checks they share (`checks`).

Import from here: `from lockstep.core.definition import Definition, parse_definition`.
"""

from .model import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    Compensation,
    Definition,
    DefinitionError,
    FailStep,
    Limits,
    RetryPolicy,
    Step,
    SucceedStep,
    WaitStep,
)
from .parse import parse_definition

__all__ = [
    "ActivityStep",
    "ApprovalStep",
    "ChoiceStep",
    "Compensation",
    "Definition",
    "DefinitionError",
    "FailStep",
    "Limits",
    "RetryPolicy",
    "Step",
    "SucceedStep",
    "WaitStep",
    "parse_definition",
]
