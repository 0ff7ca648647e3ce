"""The ``bullmq`` dialect and the user's ``--mapping`` rules, on spans shaped as their sources
emit them.

BullMQ 6.7.6 (examples/node-bullmq/node_modules/bullmq/dist/esm): ``utils/index.js:267-286``
starts ``process <queue>`` as CONSUMER and sets ``bullmq.queue.name`` and
``bullmq.queue.operation``; ``classes/worker.js:575-580`` adds ``bullmq.job.id`` and
``bullmq.job.name``; ``:634`` (completed) and ``:666-670`` (failed: a ``job failed`` event with
``bullmq.job.failed.reason``) set ``bullmq.job.attempts.made``; ``classes/job.js:474,520-527``
opens the INTERNAL child whose operation is ``retry``, ``delay`` or ``fail``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.dialects.base import KIND_CONSUMER, KIND_INTERNAL
from otel_jobsteps._core.dialects.bullmq import BULLMQ_FAILED_EVENT, DIALECT
from otel_jobsteps._core.dialects.mapping import JobMapping, mapping_dialect
from otel_jobsteps._core.events import DIALECT_EVENTS
from otel_jobsteps._core.facts import SpanEvent, SpanFacts

JOB = ("job.domain", "job.id", "job.type", "job.attempt", "job.outcome")


def _process(made: int | None, *events: SpanEvent, **extra: Any) -> SpanFacts:
    attributes: dict[str, Any] = {
        "bullmq.queue.name": "render",
        "bullmq.queue.operation": "process",
        "bullmq.worker.id": "w1",
        "bullmq.job.id": "42",
        "bullmq.job.name": "thumbnail",
        **extra,
    }
    if made is not None:
        attributes["bullmq.job.attempts.made"] = made
    return SpanFacts(1, 1, 0, "process render", 10, 90, attributes, events, kind=KIND_CONSUMER)


def _move(operation: str) -> SpanFacts:
    names = {"bullmq.queue.name": "render", "bullmq.queue.operation": operation}
    return SpanFacts(1, 2, 1, f"{operation} render", 80, 85, names, kind=KIND_INTERNAL)


def _job(span: SpanFacts) -> dict[str, Any]:
    return {name: span.attributes.get(name) for name in JOB}


def test_a_completed_run_is_its_attempt() -> None:
    (job,) = DIALECT.recognise([_process(1)])
    assert _job(job) == {
        "job.domain": "render", "job.id": "42", "job.type": "thumbnail", "job.attempt": 1,
        "job.outcome": None,
    }  # fmt: skip
    assert not job.error


def test_a_failed_run_that_bullmq_retries_is_failed_retry_with_a_retry_event() -> None:
    failed = SpanEvent("job failed", 80, {"bullmq.job.failed.reason": "disk full"})
    job, move = DIALECT.recognise([_process(2, failed), _move("delay")])
    assert (job.error, job.status_message, job.attributes["job.outcome"]) == (
        True, "disk full", "retry",
    )  # fmt: skip
    assert move.attributes["job.event.type"] == "RETRY_SCHEDULED"
    assert json.loads(move.attributes["job.event.detail"]) == {"next_attempt": 3}


def test_a_last_failure_is_failed_without_retry() -> None:
    failed = SpanEvent("job failed", 80, {"bullmq.job.failed.reason": "gone"})
    job, move = DIALECT.recognise([_process(3, failed), _move("fail")])
    assert job.error
    assert "job.outcome" not in job.attributes
    assert "job.event.type" not in move.attributes


def test_a_run_that_lost_its_lock_is_no_job() -> None:
    unit = [_process(None)]
    assert DIALECT.recognise(unit) == unit


def test_the_codes_job_attributes_win() -> None:
    (job,) = DIALECT.recognise([_process(1, **{"job.domain": "mine", "job.attempt": 5})])
    assert (job.attributes["job.domain"], job.attributes["job.attempt"]) == ("mine", 5)


def test_it_claims_a_process_span_by_its_attributes() -> None:
    span = _process(None)
    assert DIALECT.may_start_job(span.name, span.kind, span.attributes)
    assert not DIALECT.may_start_job("delay render", KIND_INTERNAL, _move("delay").attributes)


@pytest.mark.parametrize(
    ("retries", "attempt"), [pytest.param(2, 3, id="counted"), pytest.param("x", 0, id="bad")]
)
def test_a_mapping_rule_names_its_job_span(retries: object, attempt: int) -> None:
    rule = JobMapping.parse("id=task.id,domain=task.queue,type=task.name,attempt=task.retries+1")
    names = {"task.id": "x", "task.queue": "q", "task.name": "t", "task.retries": retries}
    span = SpanFacts(1, 1, 0, "run", 10, 40, names)
    dialect = mapping_dialect(rule)
    assert dialect.may_start_job(span.name, span.kind, span.attributes)
    (job,) = dialect.recognise([span])
    assert _job(job) == {
        "job.domain": "q", "job.id": "x", "job.type": "t", "job.attempt": attempt,
        "job.outcome": None,
    }  # fmt: skip


def test_mapping_rules_are_tried_before_the_built_in_dialects() -> None:
    rule = JobMapping.parse("id=bullmq.job.id,domain=bullmq.worker.id")
    chosen = select_dialects("bullmq").with_mappings([rule])
    assert chosen.names == ("mapping", "bullmq")
    (job,) = chosen.recognise([_process(2)])
    assert (job.attributes["job.domain"], job.attributes["job.attempt"]) == ("w1", 1)


def test_both_doors_keep_the_failed_event_bullmq_reads() -> None:
    assert BULLMQ_FAILED_EVENT in DIALECT_EVENTS  # `_core.events.events_read` keeps it
