"""Celery: ``instrument(app, domain="render")`` records every task run as a job attempt.

Each task's ``run`` is wrapped (as ``autoretry_for`` does), so the job span covers the body alone.
What maps to what: docs/integrations.md (read from celery's app/trace.py, task.py, request.py).
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, signals
from celery.exceptions import Retry, SoftTimeLimitExceeded
from opentelemetry import trace

from .. import context
from ..attributes import JOB_ERROR, JOB_OUTCOME
from . import EVENT_STALLED, OUTCOME_TIME_LIMIT
from ._common import (
    AdapterSettings,
    flush_provider,
    is_wrapped,
    mark_wrapped,
    record_retry_scheduled,
)

__all__ = ["instrument", "is_instrumented"]

TRACER_NAME = "otel_jobsteps.integrations.celery"


@dataclass(frozen=True)
class _Settings(AdapterSettings):
    job_type: Callable[[Task], str]
    flush_timeout_ms: int


_apps: weakref.WeakKeyDictionary[Celery, _Settings] = weakref.WeakKeyDictionary()


def instrument(
    app: Celery,
    domain: str,
    *,
    job_type: Callable[[Task], str] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    flush_timeout_ms: int = 5000,
) -> None:
    """Record every run of every task of ``app`` as an attempt of a job in ``domain``.

    Call it where the app is defined (the module the worker imports): tasks are wrapped when
    the app is finalized and again when the worker starts, before any pool process forks.
    ``job_type`` maps a task to its ``job.type`` (default: the task name). Pool processes flush
    the provider when they exit (they end with ``os._exit``), within ``flush_timeout_ms``.
    Calling it twice for one app changes the settings, never wraps twice.
    """
    _apps[app] = _Settings(
        TRACER_NAME, domain, tracer_provider, job_type or _task_name, max(1, int(flush_timeout_ms))
    )
    app.on_after_finalize.connect(_on_after_finalize, weak=False)
    signals.worker_init.connect(_on_worker_init, weak=False)
    signals.worker_process_shutdown.connect(_on_process_shutdown, weak=False)
    if app.finalized:
        _wrap_tasks(app)


def is_instrumented(app: Celery) -> bool:
    """Whether `instrument` was called for ``app``."""
    return app in _apps


def _task_name(task: Task) -> str:
    return str(task.name)


def _on_after_finalize(sender: Celery, **_: Any) -> None:
    _wrap_tasks(sender)


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    # Sent after the worker imported every task module and before the pool starts, so tasks
    # registered after finalization are wrapped before any tracer (celery.app.trace) is built.
    app = getattr(sender, "app", None)
    if app is not None:
        _wrap_tasks(app)


def _on_process_shutdown(**_: Any) -> None:
    # billiard ends pool processes with os._exit: the provider's atexit flush never runs.
    for settings in list(_apps.values()):
        flush_provider(settings.tracer_provider, settings.flush_timeout_ms)


def _wrap_tasks(app: Celery) -> None:
    if app not in _apps:
        return
    for task in list(app.tasks.values()):
        if getattr(task, "app", None) is app and not is_wrapped(task.run):
            task.run = _wrapped_run(task, task.run)
            task.retry = _wrapped_retry(task.retry)


def _wrapped_run(task: Task, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        settings = _apps.get(task.app)
        request = task.request
        if settings is None or request.called_directly or not request.id:
            return original(*args, **kwargs)  # a plain call, not a task execution
        tracer = settings.tracer()
        retries = request.retries or 0
        soft, hard = _time_limits(task, request)
        started = time.monotonic()
        try:
            with context.job_attempt(
                settings.domain,
                request.id,
                settings.job_type(task),
                retries,
                time_limit=soft or hard,
                tracer=tracer,
            ) as span:
                if (request.delivery_info or {}).get("redelivered"):
                    context.record_event(
                        EVENT_STALLED,
                        "redelivered by the broker: a worker lost it before acknowledging it",
                        tracer=tracer,
                        source="celery.redelivered",
                    )
                try:
                    return original(*args, **kwargs)
                except Retry as retry:
                    _name_cause(span, retry)
                    _record_retry(span, tracer, retry, retries)
                    raise
                except SoftTimeLimitExceeded:
                    span.set_attribute(JOB_OUTCOME, OUTCOME_TIME_LIMIT)
                    raise
                except (SystemExit, KeyboardInterrupt):
                    # billiard's hard limit sends TERM (SystemExit here), then KILL 0.1 s later.
                    if hard and time.monotonic() - started >= hard * 0.9:
                        span.set_attribute(JOB_OUTCOME, OUTCOME_TIME_LIMIT)
                    raise
        except (SystemExit, KeyboardInterrupt):
            # The process is going away: write the attempt's end now, not at exit.
            flush_provider(settings.tracer_provider, min(settings.flush_timeout_ms, 1000))
            raise

    return mark_wrapped(run)


def _wrapped_retry(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def retry(*args: Any, **kwargs: Any) -> Any:
        # The span open here (a step) ends with the Retry escaping it: name the cause first.
        try:
            signal = original(*args, **kwargs)
        except Retry as raised:
            _name_cause(trace.get_current_span(), raised)
            raise
        if isinstance(signal, Retry):  # throw=False: the caller raises it
            _name_cause(trace.get_current_span(), signal)
        return signal

    return retry


def _cause(retry: Retry) -> str | None:
    """What made the task retry, as the SDK names an exception: ``OSError: disk full``."""
    exc = retry.exc
    if exc is None:
        return None
    kind, module = type(exc).__qualname__, type(exc).__module__
    kind = f"{module}.{kind}" if module and module != "builtins" else kind
    return f"{kind}: {exc}".rstrip(": ")


def _name_cause(span: trace.Span, retry: Retry) -> None:
    """The span's error is what made the task retry, not the Retry (as RQ and BullMQ record)."""
    cause = _cause(retry)
    if cause is not None:
        span.set_attribute(JOB_ERROR, cause)


def _record_retry(span: trace.Span, tracer: trace.Tracer, retry: Retry, retries: int) -> None:
    detail: dict[str, Any] = {"next_attempt": retries + 2}
    if retry.when is not None:
        detail["when"] = str(retry.when)
    record_retry_scheduled(span, tracer, _cause(retry), **detail)


def _time_limits(task: Task, request: Any) -> tuple[float | None, float | None]:
    """(soft, hard) limits of this run in seconds, as the pool applies them."""
    hard, soft = request.timelimit or (None, None)
    conf = task.app.conf
    soft = soft or task.soft_time_limit or conf.task_soft_time_limit
    hard = hard or task.time_limit or conf.task_time_limit
    return (float(soft) if soft else None), (float(hard) if hard else None)
