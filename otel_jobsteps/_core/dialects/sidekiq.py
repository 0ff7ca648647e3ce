"""Sidekiq (Ruby), from ``opentelemetry-instrumentation-sidekiq``; source not reachable here.

The gem cannot be fetched here (RubyGems is not one of the registries this machine reaches), so
this follows its server middleware as documented
(``lib/opentelemetry/instrumentation/sidekiq/middlewares/server/tracer_middleware.rb``),
unverified against its code: each run of a job is a CONSUMER span ``<queue> process`` (or
``<job class> process`` with ``span_naming: :job_class``) with ``messaging.system =
"sidekiq"``, ``messaging.sidekiq.job_class``, the jid in ``messaging.message_id`` (newer
conventions: ``messaging.message.id``), the queue in ``messaging.destination`` (newer:
``messaging.destination.name``) and ``messaging.operation = "process"``; ``created_at`` and
``enqueued_at`` events; an exception recorded with status ERROR.

The span is the job: domain the queue (``sidekiq`` without it), id the jid, type the job class,
attempt 1 unless the code names it: no attribute carries Sidekiq's ``retry_count``, so a retry
is a second run of attempt 1 and the first run's end stands. One line in a server middleware
gives every attempt its row: ``OpenTelemetry::Trace.current_span.set_attribute("job.attempt",
msg["retry_count"] ? msg["retry_count"] + 2 : 1)`` (the unit is read at the span's end, so the
attribute may come late). Its steps are the spans the code marks with ``job.step.key``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_TYPE
from ..facts import SpanFacts
from .base import KIND_CONSUMER, Dialect, Gate, with_defaults

__all__ = ["DIALECT"]

SYSTEM = "messaging.system"
JOB_CLASS = "messaging.sidekiq.job_class"
MESSAGE_ID = ("messaging.message.id", "messaging.message_id")
DESTINATION = ("messaging.destination.name", "messaging.destination")


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return kind == KIND_CONSUMER and attributes.get(SYSTEM) == "sidekiq"


def _first(attributes: Mapping[str, Any], names: Sequence[str]) -> Any:
    return next((value for name in names if (value := attributes.get(name))), None)


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    root = unit[0]
    attributes = root.attributes
    jid = _first(attributes, MESSAGE_ID)
    if jid is None:
        return list(unit)
    job = {
        JOB_DOMAIN: _first(attributes, DESTINATION) or "sidekiq",
        JOB_ID: str(jid),
        JOB_TYPE: attributes.get(JOB_CLASS),
        JOB_ATTEMPT: 1,
    }
    return [with_defaults(root, job), *unit[1:]]


DIALECT = Dialect(
    name="sidekiq",
    source=(
        "opentelemetry-instrumentation-sidekiq (RubyGems), lib/opentelemetry/instrumentation/"
        "sidekiq/middlewares/server/tracer_middleware.rb, as documented: source not reachable "
        "from here"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_CONSUMER}),
    gate=Gate(attributes=frozenset({SYSTEM})),
)
