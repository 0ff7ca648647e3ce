"""Oban (Elixir), from ``opentelemetry_oban``'s job spans; source not reachable from here.

Neither the ``oban`` nor the ``opentelemetry_oban`` Hex package can be fetched here, and the
``oban`` package on PyPI (0.7.0, Oban for Python) emits no spans, only ``oban.job.start``/
``stop``/``exception`` telemetry events. So this follows ``opentelemetry_oban``'s job handler as
documented (``lib/opentelemetry_oban/job_handler.ex``), unverified against its code: each run of
a job is a CONSUMER span ``<worker> process`` with ``messaging.system = "oban"``, the queue in
``messaging.destination.name`` (older releases: ``messaging.destination``) and the job in
``oban.job.job_id``, ``oban.job.worker``, ``oban.job.attempt`` (1-based: Oban counts the run
being made) and ``oban.job.max_attempts`` (older releases: ``messaging.oban.*``; both are
read). An error or exception records it and sets the status ERROR.

The span is the job: domain the queue (``oban`` without it), id ``oban.job.job_id``, type
``oban.job.worker``, attempt ``oban.job.attempt``; a failed run with attempts left
(``attempt < max_attempts``) is FAILED ``retry``, as Oban will run it again. Its steps are the
spans the code marks with ``job.step.key``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_OUTCOME, JOB_TYPE
from ..facts import SpanFacts
from ..vocabulary import OUTCOME_RETRY
from .base import KIND_CONSUMER, Dialect, Gate, number, with_defaults

__all__ = ["DIALECT"]

SYSTEM = "messaging.system"
DESTINATION = ("messaging.destination.name", "messaging.destination")
PREFIXES = ("oban.job.", "messaging.oban.")


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return kind == KIND_CONSUMER and attributes.get(SYSTEM) == "oban"


def _job(attributes: Mapping[str, Any], name: str) -> Any:
    """``oban.job.<name>``, else the older ``messaging.oban.<name>``."""
    for prefix in PREFIXES:
        value = attributes.get(prefix + name)
        if value is not None:
            return value
    return None


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    root = unit[0]
    attributes = root.attributes
    job_id, attempt = _job(attributes, "job_id"), number(_job(attributes, "attempt"))
    if job_id is None or attempt is None:
        return list(unit)
    max_attempts = number(_job(attributes, "max_attempts"))
    retried = root.error and max_attempts is not None and attempt < max_attempts
    queue = next((value for key in DESTINATION if (value := attributes.get(key))), None)
    job = {
        JOB_DOMAIN: queue or "oban",
        JOB_ID: str(job_id),
        JOB_TYPE: _job(attributes, "worker"),
        JOB_ATTEMPT: attempt,
        JOB_OUTCOME: OUTCOME_RETRY if retried else None,
    }
    return [with_defaults(root, job), *unit[1:]]


DIALECT = Dialect(
    name="oban",
    source=(
        "opentelemetry_oban (Hex), lib/opentelemetry_oban/job_handler.ex, as documented: "
        "source not reachable from here"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_CONSUMER}),
    gate=Gate(attributes=frozenset({SYSTEM})),
)
