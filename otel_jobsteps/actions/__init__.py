"""Operator actions: retry and cancel a job through its queue, each audited as an ACTION row.

`load_actions` reads where each domain's jobs live (``--actions FILE``); `run_action` acts on
one job; docs/integrations.md says per queue what retry and cancel do and do not do.
"""

from __future__ import annotations

from .answers import DONE, NOT_FOUND, REFUSED, Answer, Outcome
from .config import ActionsConfig, DomainConfig, load_actions
from .runner import ACTIONS, Action, ActionResult, run_action

__all__ = [
    "ACTIONS",
    "DONE",
    "NOT_FOUND",
    "REFUSED",
    "Action",
    "ActionResult",
    "ActionsConfig",
    "Answer",
    "DomainConfig",
    "Outcome",
    "load_actions",
    "run_action",
]
