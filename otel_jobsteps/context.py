"""Sugar over spans: ``job_attempt()``, ``step()`` and ``progress()``.

They only create spans and events with the attributes of `otel_jobsteps.attributes`, so code
using them and code using a plain tracer produce the same rows. The scope travels in the
OpenTelemetry context (contextvars), so threads that copy the context and asyncio tasks see it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import AttributeValue

from .attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EVENT_DETAIL,
    JOB_EVENT_MESSAGE,
    JOB_EVENT_TYPE,
    JOB_EXECUTION,
    JOB_ID,
    JOB_STEP_DETAIL,
    JOB_STEP_KEY,
    JOB_TIME_LIMIT,
    JOB_TYPE,
)

__all__ = ["job_attempt", "progress", "record_event", "record_job_event", "step"]

TRACER_NAME = "otel_jobsteps"
_STEP_SPAN = otel_context.create_key("otel_jobsteps.step_span")
_PRIMITIVES = (str, bool, int, float)


class _SpanScope:
    """A span made current for a ``with`` or ``async with`` block, yielding the span."""

    def __init__(
        self,
        name: str,
        attributes: dict[str, AttributeValue],
        tracer: trace.Tracer | None,
        *,
        marks_step: bool = False,
    ) -> None:
        self._name = name
        self._attributes = attributes
        self._tracer = tracer or trace.get_tracer(TRACER_NAME)
        self._marks_step = marks_step
        self._manager: AbstractContextManager[trace.Span] | None = None
        self._token: object = None

    def __enter__(self) -> trace.Span:
        self._manager = self._tracer.start_as_current_span(self._name, attributes=self._attributes)
        span = self._manager.__enter__()
        if self._marks_step:
            self._token = otel_context.attach(otel_context.set_value(_STEP_SPAN, span))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        assert self._manager is not None
        if exc is not None and not isinstance(exc, Exception):
            # OpenTelemetry records only Exception subclasses; a cancelled or interrupted
            # attempt (CancelledError, KeyboardInterrupt, SystemExit) did not succeed either.
            span = trace.get_current_span()
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}".rstrip(": "))
        self._manager.__exit__(exc_type, exc, traceback)

    async def __aenter__(self) -> trace.Span:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)


def job_attempt(
    domain: str,
    job_id: str | int,
    job_type: str,
    attempts_made: int = 0,
    *,
    time_limit: float | None = None,
    execution: str | None = None,
    name: str | None = None,
    tracer: trace.Tracer | None = None,
) -> _SpanScope:
    """Run one attempt of a job as a job span (``with`` or ``async with``), yielding the span.

    ``attempts_made`` counts the attempts before this one, so the first run passes 0.
    ``time_limit`` (seconds): finishing later records the attempt as FAILED ``time_limit``.
    ``execution`` names this run when a queue may run the same attempt twice.
    """
    attributes: dict[str, AttributeValue] = {
        JOB_DOMAIN: domain,
        JOB_ID: str(job_id),
        JOB_TYPE: job_type,
        JOB_ATTEMPT: attempts_made + 1 if type(attempts_made) is int else str(attempts_made),
    }
    if time_limit is not None:
        attributes[JOB_TIME_LIMIT] = float(time_limit)
    if execution is not None:
        attributes[JOB_EXECUTION] = execution
    return _SpanScope(name or f"job {job_type}", attributes, tracer)


def step(key: str, *, name: str | None = None, tracer: trace.Tracer | None = None) -> _SpanScope:
    """Run a step of the current job as a step span (``with`` or ``async with``)."""
    return _SpanScope(name or key.lower(), {JOB_STEP_KEY: key}, tracer, marks_step=True)


def _is_attribute_value(value: Any) -> bool:
    if isinstance(value, _PRIMITIVES):
        return True
    kinds = {type(v) for v in value} if isinstance(value, (list, tuple)) else set()
    return len(kinds) == 1 and issubclass(kinds.pop(), _PRIMITIVES)


def progress(detail: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
    """Report the current step's progress: the detail replaces the previous one (debounced).

    Flat values become the progress event's attributes. A detail with nested objects or None
    travels whole as JSON in the event's ``job.step.detail`` attribute and is stored as the same
    object. Outside a step this does nothing.
    """
    values = {**(detail or {}), **fields}
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None)
    if not attributes or JOB_STEP_KEY not in attributes:
        span = otel_context.get_value(_STEP_SPAN) or span  # type: ignore[assignment]
    if all(_is_attribute_value(v) for v in values.values()):
        span.add_event("progress", values)
    else:
        span.add_event("progress", {JOB_STEP_DETAIL: json.dumps(values, default=str)})


def _event_attributes(
    event_type: str, message: str | None, detail: Mapping[str, Any]
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {JOB_EVENT_TYPE: event_type}
    if message is not None:
        attributes[JOB_EVENT_MESSAGE] = message
    if detail:
        attributes[JOB_EVENT_DETAIL] = json.dumps(dict(detail), default=str)
    return attributes


def record_event(
    event_type: str,
    message: str | None = None,
    /,
    *,
    tracer: trace.Tracer | None = None,
    **detail: Any,
) -> None:
    """Record an ordinary event (``STALLED``, ``RETRY_SCHEDULED``, ``LOG``...) of the current job.

    It becomes a ``job_event`` row of that type, written in order with the steps; it never
    touches the open step. Outside a job scope it does nothing.
    """
    tracer = tracer or trace.get_tracer(TRACER_NAME)
    attributes = _event_attributes(event_type, message, detail)
    tracer.start_span(f"job event {event_type}", attributes=attributes).end()


def record_job_event(
    domain: str,
    job_id: str | int,
    event_type: str,
    message: str | None = None,
    *,
    attempt: int = 1,
    job_type: str | None = None,
    tracer: trace.Tracer | None = None,
    **detail: Any,
) -> None:
    """Record an ordinary event for a job named explicitly, e.g. from a queue watcher.

    Needs a `JobStepsProcessor` on the tracer's provider, like every other record.
    """
    tracer = tracer or trace.get_tracer(TRACER_NAME)
    attributes = _event_attributes(event_type, message, detail)
    attributes.update({JOB_DOMAIN: domain, JOB_ID: str(job_id), JOB_ATTEMPT: attempt})
    if job_type is not None:
        attributes[JOB_TYPE] = job_type
    tracer.start_span(f"job event {event_type}", attributes=attributes).end()
