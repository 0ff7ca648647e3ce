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

from . import attributes as attr
from ._live.feeds import exports_by_otlp, feeds_job_steps
from ._live.setup import setup_hint_here
from ._telemetry.log import warn_on_console

__all__ = ["job_attempt", "progress", "record_event", "record_job_event", "step"]

TRACER_NAME = "otel_jobsteps"
_JOB_SPAN = otel_context.create_key("otel_jobsteps.job_span")
_STEP_SPAN = otel_context.create_key("otel_jobsteps.step_span")
# The tracer job_attempt() was given: steps and events inside it use it unless given their own.
_JOB_TRACER = otel_context.create_key("otel_jobsteps.job_tracer")


def _tracer(given: trace.Tracer | None) -> trace.Tracer:
    """``given``, else the enclosing job's tracer, else the global provider's."""
    if given is not None:
        return given
    inherited = otel_context.get_value(_JOB_TRACER)
    if isinstance(inherited, trace.Tracer):
        return inherited
    return trace.get_tracer(TRACER_NAME)


_PRIMITIVES = (str, bool, int, float)
_warned: set[str] = set()


def _warn_once(kind: str, message: str) -> None:
    """Log ``message`` the first time ``kind`` happens in this process: a no-op must not be
    silent, and must not flood either."""
    if kind not in _warned:
        _warned.add(kind)
        warn_on_console(message)


def warn_missing_processor(owner: object | None = None) -> None:
    """Warn once that no JobStepsProcessor records the jobs of ``owner`` (an SDK provider,
    tracer or span; default: the global provider), saying what to do. Spans exported by OTLP
    may be recorded by ``collect``: no warning then."""
    if "setup" in _warned:
        return  # said once already: the hint below reads entry points, not for every job
    target = trace.get_tracer_provider() if owner is None else owner
    if exports_by_otlp(target):
        return
    if isinstance(target, trace.ProxyTracerProvider):
        reason = "no OpenTelemetry SDK tracer provider is set"
    else:
        reason = "the tracer provider has no JobStepsProcessor"
    _warn_once("setup", f"{reason}, so no job steps are recorded: {setup_hint_here()}")


def _check_recorded(span: trace.Span, tracer_given: bool) -> None:
    """Warn once when a job span will not reach a JobStepsProcessor, saying what to do."""
    feeds = feeds_job_steps(span)
    if feeds:
        return
    if feeds is False:
        warn_missing_processor(span)
    elif span.is_recording():
        return  # a tracer we cannot look into: trust it
    elif not tracer_given and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        warn_missing_processor()
    else:
        _warn_once(
            "not-recorded",
            "job_attempt(): the job span is not recorded (no SDK tracer, or the sampler dropped "
            "it), so its steps are not either: JobStepsProcessor sees recorded spans only; "
            "use a sampler that keeps job spans, e.g. OTEL_TRACES_SAMPLER=always_on",
        )


class _SpanScope:
    """A span made current for a ``with`` or ``async with`` block, yielding the span."""

    def __init__(
        self,
        name: str,
        attributes: dict[str, AttributeValue],
        tracer: trace.Tracer | None,
        *,
        marks: object = None,
    ) -> None:
        self._name = name
        self._attributes = attributes
        self._tracer_given = tracer is not None
        self._tracer = tracer
        self._marks = marks  # the context key this span is made the value of
        self._manager: AbstractContextManager[trace.Span] | None = None
        self._token: object = None

    def __enter__(self) -> trace.Span:
        if self._marks is _STEP_SPAN and "step-outside-job" not in _warned and not _in_job():
            _warn_once(
                "step-outside-job",
                f"step({self._attributes[attr.JOB_STEP_KEY]!r}) ran outside a job, so it is not "
                "recorded: run it inside job_attempt() (or a span with the job.* attributes), "
                "or instrument the queue (otel_jobsteps.integrations)",
            )
        tracer = _tracer(self._tracer)
        self._manager = tracer.start_as_current_span(self._name, attributes=self._attributes)
        span = self._manager.__enter__()
        if self._marks is _JOB_SPAN:
            _check_recorded(span, self._tracer_given)
        if self._marks is not None:
            marked = otel_context.set_value(self._marks, span)  # type: ignore[arg-type]
            if self._marks is _JOB_SPAN:
                marked = otel_context.set_value(_JOB_TRACER, tracer, marked)
            self._token = otel_context.attach(marked)
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


def _job_attributes(
    domain: str, job_id: str | int, attempt: AttributeValue, job_type: str | None
) -> dict[str, AttributeValue]:
    """The ``job.*`` attributes naming one attempt of a job: a job span's, or an event's."""
    attributes: dict[str, AttributeValue] = {
        attr.JOB_DOMAIN: domain,
        attr.JOB_ID: str(job_id),
        attr.JOB_ATTEMPT: attempt,
    }
    if job_type is not None:
        attributes[attr.JOB_TYPE] = job_type
    return attributes


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
    attempt = attempts_made + 1 if type(attempts_made) is int else str(attempts_made)
    attributes = _job_attributes(domain, job_id, attempt, job_type)
    if time_limit is not None:
        attributes[attr.JOB_TIME_LIMIT] = float(time_limit)
    if execution is not None:
        attributes[attr.JOB_EXECUTION] = execution
    return _SpanScope(name or f"job {job_type}", attributes, tracer, marks=_JOB_SPAN)


def step(key: str, *, name: str | None = None, tracer: trace.Tracer | None = None) -> _SpanScope:
    """Run a step of the current job as a step span (``with`` or ``async with``)."""
    return _SpanScope(name or key.lower(), {attr.JOB_STEP_KEY: key}, tracer, marks=_STEP_SPAN)


def _current_attributes() -> Any:
    return getattr(trace.get_current_span(), "attributes", None) or {}


def _in_job() -> bool:
    """A job_attempt() encloses the current context, or the current span is a job span.

    A plain-tracer job span further up is invisible here (a span knows only its parent's ids)."""
    return otel_context.get_value(_JOB_SPAN) is not None or attr.JOB_ID in _current_attributes()


def _is_attribute_value(value: Any) -> bool:
    if isinstance(value, _PRIMITIVES):
        return True
    kinds = {type(v) for v in value} if isinstance(value, (list, tuple)) else set()
    return len(kinds) == 1 and issubclass(kinds.pop(), _PRIMITIVES)


def progress(detail: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
    """Report the current step's progress: the detail replaces the previous one (debounced).

    Flat values become the progress event's attributes. A detail with nested objects or None
    travels whole as JSON in the event's ``job.step.detail`` attribute and is stored as the same
    object. Outside a step it records nothing and warns once.
    """
    values = {**(detail or {}), **fields}
    span = trace.get_current_span()
    if attr.JOB_STEP_KEY not in _current_attributes():
        step_span = otel_context.get_value(_STEP_SPAN)
        if step_span is None:
            _warn_once(
                "progress-outside-step",
                "progress() ran outside a step, so it is not recorded: call it inside "
                "`with step(KEY):` (or a span with the job.step.key attribute)",
            )
            return
        span = step_span  # type: ignore[assignment]
    if all(_is_attribute_value(v) for v in values.values()):
        span.add_event("progress", values)
    else:
        span.add_event("progress", {attr.JOB_STEP_DETAIL: _json_text(values)})


def _json_text(values: Mapping[str, Any]) -> str:
    """JSON of a detail; one that JSON cannot hold (nested thousands deep, a cycle) becomes a
    marker instead of an exception in the job."""
    try:
        return json.dumps(values, default=str)
    except (RecursionError, ValueError, TypeError) as error:
        return json.dumps({"value": f"<not JSON: {type(error).__name__}>"})


def _event_attributes(
    event_type: str, message: str | None, detail: Mapping[str, Any]
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {attr.JOB_EVENT_TYPE: event_type}
    if message is not None:
        attributes[attr.JOB_EVENT_MESSAGE] = message
    if detail:
        attributes[attr.JOB_EVENT_DETAIL] = _json_text(dict(detail))
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
    tracer = _tracer(tracer)
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
    tracer = _tracer(tracer)
    attributes = {
        **_event_attributes(event_type, message, detail),
        **_job_attributes(domain, job_id, attempt, job_type),
    }
    tracer.start_span(f"job event {event_type}", attributes=attributes).end()
