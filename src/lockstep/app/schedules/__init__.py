"""Schedules (issue 18): durable rows that start runs at the slots of a cron expression in a time zone.

    rules.py    what a schedule may be (cron, zone, rate, policies) and its view
    inputs.py   its input at rest: sensitive values sealed under the schedule's own key
    manage.py   create, update, pause, resume, delete, trigger (audited), list, show
    fire.py     the scheduler's pass: due slots start runs, one transaction with the advance

The slots themselves (which are due, which are missed, DST) are the pure core's: core/schedule.py.
"""

from .fire import Firing
from .inputs import InputSeal
from .manage import ACTOR_PREFIX, Schedules, actor_of
from .rules import paused_since

__all__ = ["ACTOR_PREFIX", "Firing", "InputSeal", "Schedules", "actor_of", "paused_since"]
