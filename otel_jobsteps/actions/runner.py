"""Run one action on one job: idempotency, the running check, the queue, the audit row.

Per job, under a transaction-scoped advisory lock (one action at a time): a key seen before
answers with the earlier action (its ACTION row's detail holds the key); a job whose latest
attempt is running is refused unless forced; else the queue's adapter acts, and the ACTION row
records action, actor, outcome, the queue's answer and the key on the attempt acted on.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from psycopg.types.json import Jsonb

from .._cli.extras import install_hint
from .._pg.db import Target, borrowed_connection
from ..errors import ConfigurationError
from ..sql import qualified_queries
from .answers import DONE, NOT_FOUND, REFUSED, Answer, Outcome
from .config import ActionsConfig, DomainConfig

__all__ = ["ACTIONS", "Action", "ActionResult", "run_action"]

Action = Literal["retry", "cancel"]
ACTIONS: tuple[Action, ...] = ("retry", "cancel")


class _Adapter(Protocol):
    def retry(self, config: DomainConfig, job_id: str, force: bool) -> Answer: ...
    def cancel(self, config: DomainConfig, job_id: str, force: bool) -> Answer: ...


@dataclass(frozen=True)
class ActionResult:
    """What an action did: its ACTION row's id (None: nothing recorded, the job is unknown to
    both the queue and the database), the outcome, the queue's answer and the attempt acted on."""

    action_id: int | None
    action: str
    outcome: Outcome
    answer: str
    attempt: int
    repeated: bool = False  # the idempotency key named an earlier action: this is its result

    def to_dict(self) -> dict[str, Any]:
        return {
            "action_id": self.action_id,
            "action": self.action,
            "outcome": self.outcome,
            "answer": self.answer,
            "attempt": self.attempt,
            "repeated": self.repeated,
        }


def adapter(queue: str) -> _Adapter:
    """The adapter module of a queue kind (its client library is an extra)."""
    try:
        module: Any = importlib.import_module(f"{__package__}.{queue}")
    except ImportError as error:
        raise ConfigurationError(
            f"{queue} actions need the {queue} extra ({error.name} is missing): "
            + install_hint(queue)
        ) from None
    return module  # type: ignore[no-any-return]


def run_action(
    target: Target,
    config: ActionsConfig,
    action: Action,
    domain: str,
    job_id: str,
    *,
    actor: str,
    force: bool = False,
    idempotency_key: str | None = None,
    schema: str = "public",
) -> ActionResult:
    """Retry or cancel ``job_id`` of ``domain`` through its queue and audit it (see module)."""
    if action not in ACTIONS:
        raise ConfigurationError(f"unknown action {action!r} (retry or cancel)")
    domain_config = config.domain(domain)
    act = getattr(adapter(domain_config.queue), action)
    queries = qualified_queries("actions.sql", schema)
    key = {"domain": domain, "job_id": job_id}
    with borrowed_connection(target) as conn, conn.transaction():
        conn.execute(queries["lock_job"], key)
        if idempotency_key is not None:
            earlier = conn.execute(
                queries["earlier_action"], {**key, "key": idempotency_key}
            ).fetchone()
            if earlier is not None:
                return _earlier(*earlier)
        latest = conn.execute(queries["latest_attempt"], key).fetchone()
        attempt, status, job_type = latest if latest is not None else (1, None, None)
        if status == "RUNNING" and not force:
            answer = Answer(REFUSED, f"its latest attempt {attempt} is running (force to act)")
        else:
            answer = act(domain_config, job_id, force)
        if latest is None and answer.outcome == NOT_FOUND:
            return ActionResult(None, action, answer.outcome, answer.answer, attempt)
        detail = {
            "action": action,
            "actor": actor,
            "outcome": answer.outcome,
            "answer": answer.answer,
            "queue": domain_config.queue,
            "forced": force,
            "idempotency_key": idempotency_key,
        }
        if action == "retry" and answer.outcome == DONE:
            detail["next_attempt"] = attempt + 1
        row = {**key, "job_type": job_type, "attempt": attempt, "detail": Jsonb(detail)}
        message = _message(action, actor, answer, attempt)
        action_row = conn.execute(queries["insert_action"], {**row, "message": message}).fetchone()
        assert action_row is not None
        if latest is None and action == "cancel" and answer.outcome == DONE:
            conn.execute(queries["cancelled_attempt"], row)
    return ActionResult(int(action_row[0]), action, answer.outcome, answer.answer, attempt)


def _message(action: str, actor: str, answer: Answer, attempt: int) -> str:
    """The timeline's line: "retried by operator via page → attempt 3"."""
    if answer.outcome != DONE:
        return f"{action} by {actor} {answer.outcome.replace('_', ' ')}: {answer.answer}"
    if action == "retry":
        return f"retried by {actor} → attempt {attempt + 1}"
    return f"cancelled by {actor}: {answer.answer}"


def _earlier(action_id: int, attempt: int, detail: dict[str, Any]) -> ActionResult:
    outcome = detail.get("outcome")
    return ActionResult(
        action_id,
        str(detail.get("action")),
        outcome if outcome in (DONE, REFUSED, NOT_FOUND) else REFUSED,
        str(detail.get("answer")),
        attempt,
        repeated=True,
    )
