"""RQ: run ``JobStepsWorker`` (``rq worker -w otel_jobsteps.integrations.rq.JobStepsWorker``).

Every job the worker performs is a job attempt; with ``OTEL_JOBSTEPS_DSN`` set it needs no code.
What maps to what: docs/integrations.md (read from RQ 3.0's worker, job and registry modules).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from rq.exceptions import AbandonedJobError
from rq.executions import Execution
from rq.job import Job, Retry
from rq.queue import Queue
from rq.timeouts import JobTimeoutException
from rq.worker import SimpleWorker, Worker
from rq.worker.base import BaseWorker

from .. import context
from ..attributes import JOB_OUTCOME
from ..auto import DOMAIN_VARIABLE
from . import EVENT_RETRY_SCHEDULED, EVENT_STALLED, OUTCOME_RETRY, OUTCOME_TIME_LIMIT
from ._common import ensure_recording, flush_provider, logger, require_domain

__all__ = [
    "JobStepsSimpleWorker",
    "JobStepsWorker",
    "JobStepsWorkerMixin",
    "abandoned_job_handler",
    "attempt_of",
    "instrument",
]

TRACER_NAME = "otel_jobsteps.integrations.rq"
ATTEMPT_KEY = "otel_jobsteps.attempt"
FIRST_RETRIES_LEFT_KEY = "otel_jobsteps.first_retries_left"

ExceptionHandler = Callable[..., Any]


def _as_int(value: object) -> int | None:
    return value if type(value) is int else None


def attempt_of(job: Job) -> int:
    """The attempt number the adapter gave the job's latest run (1 before any run)."""
    return _as_int((job.meta or {}).get(ATTEMPT_KEY)) or 1


def _claim_attempt(job: Job) -> int:
    """Number this run and store it in ``job.meta`` before the job body runs."""
    meta = job.meta
    retries_left = job.retries_left or 0
    first = _as_int(meta.get(FIRST_RETRIES_LEFT_KEY))
    if first is None:
        first = meta[FIRST_RETRIES_LEFT_KEY] = retries_left
    by_counters = 1 + max(0, first - retries_left) + (job.number_of_retries or 0)
    attempt = max(by_counters, (_as_int(meta.get(ATTEMPT_KEY)) or 0) + 1)
    meta[ATTEMPT_KEY] = attempt
    try:
        job.save_meta()  # type: ignore[no-untyped-call]
    except Exception as error:  # noqa: BLE001 - bookkeeping must not fail the job
        logger.warning("saving the attempt number of RQ job %s failed: %s", job.id, error)
    return attempt


def _domain_of(domain: str | None, job: Job) -> str:
    return domain or os.environ.get(DOMAIN_VARIABLE) or job.origin


def _job_type(job: Job) -> str:
    try:
        return job.func_name or "unknown"
    except Exception:  # noqa: BLE001 - an undeserializable job still gets its rows
        return "unknown"


def _record_stalled(
    domain: str, job: Job, message: str, tracer: trace.Tracer, **detail: Any
) -> None:
    try:
        attempt = _as_int(job.get_meta(refresh=True).get(ATTEMPT_KEY)) or 1
    except Exception:  # noqa: BLE001 - the job hash may be gone
        attempt = attempt_of(job)
    context.record_job_event(
        domain,
        job.id,
        EVENT_STALLED,
        message,
        attempt=attempt,
        job_type=_job_type(job),
        tracer=tracer,
        **detail,
    )


def abandoned_job_handler(
    domain: str | None = None, *, tracer: trace.Tracer | None = None
) -> ExceptionHandler:
    """An RQ exception handler recording STALLED for jobs the registry cleanup abandons.

    `JobStepsWorker` installs one; add it yourself to a worker of another class, or to code
    that calls ``StartedJobRegistry.cleanup`` (domain: the given one, else the job's queue).
    """

    def handle(
        job: Job,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None and issubclass(exc_type, AbandonedJobError):
            _record_stalled(
                _domain_of(domain, job),
                job,
                "abandoned: its execution expired in the StartedJobRegistry",
                tracer or trace.get_tracer(TRACER_NAME),
                source="rq.abandoned",
            )
        return None  # go on with the next handler

    return handle


class JobStepsWorkerMixin(BaseWorker):
    """Adds job-attempt recording to an RQ worker class (put it first in the bases)."""

    jobsteps_domain: str | None = None
    """The ``job.domain`` of every job; None: ``OTEL_JOBSTEPS_DOMAIN``, else the queue name."""
    jobsteps_tracer_provider: trace.TracerProvider | None = None
    """The provider to record with; None: the global one."""
    jobsteps_flush_timeout_ms: int = 5000
    """How long the work horse may wait for the rows before it exits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._jobsteps_span: trace.Span | None = None
        self._jobsteps_outcome: str | None = None
        self._jobsteps_attempt = 0
        self.push_exc_handler(self._jobsteps_on_abandoned)  # type: ignore[no-untyped-call]

    def work(self, *args: Any, **kwargs: Any) -> bool:
        # In the worker, before it forks a work horse per job: horses inherit the processor.
        ensure_recording(self.jobsteps_tracer_provider)
        return super().work(*args, **kwargs)

    def _jobsteps_tracer(self) -> trace.Tracer:
        return trace.get_tracer(TRACER_NAME, tracer_provider=self.jobsteps_tracer_provider)

    def _jobsteps_on_abandoned(self, job: Job, *exc_info: Any) -> None:
        abandoned_job_handler(self.jobsteps_domain, tracer=self._jobsteps_tracer())(job, *exc_info)

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        attempt = _claim_attempt(job)
        timeout = job.timeout or self.queue_class.DEFAULT_TIMEOUT
        self._jobsteps_outcome = None
        self._jobsteps_attempt = attempt
        try:
            with context.job_attempt(
                _domain_of(self.jobsteps_domain, job),
                job.id,
                _job_type(job),
                attempt - 1,
                time_limit=None if timeout == -1 else float(timeout),
                execution=execution.id,
                tracer=self._jobsteps_tracer(),
            ) as span:
                self._jobsteps_span = span
                try:
                    return super().perform_job(job, queue, execution)
                finally:
                    self._jobsteps_span = None
        finally:
            if self.is_horse:  # os._exit follows: write the rows now
                flush_provider(self.jobsteps_tracer_provider, self.jobsteps_flush_timeout_ms)

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        span, error = self._jobsteps_span, exc_info[1] if len(exc_info) > 1 else None
        if span is not None and isinstance(error, BaseException):
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            if isinstance(error, JobTimeoutException):
                self._jobsteps_set_outcome(OUTCOME_TIME_LIMIT)
        super().handle_exception(job, *exc_info)

    def handle_job_failure(
        self,
        job: Job,
        queue: Queue,
        started_job_registry: Any = None,
        exc_string: str = "",
        execution: Execution | None = None,
    ) -> None:
        # Inside perform_job (the horse): RQ retries when retries are left (Job.should_retry).
        if self._jobsteps_span is not None and job.should_retry:
            self._jobsteps_retry_scheduled(job.retries_left, job.get_retry_interval())
        super().handle_job_failure(job, queue, started_job_registry, exc_string, execution)

    def handle_job_retry(
        self,
        job: Job,
        queue: Queue,
        retry: Retry,
        started_job_registry: Any,
        execution: Execution,
    ) -> None:
        span = self._jobsteps_span
        if span is not None:
            if job.number_of_retries and job.number_of_retries >= retry.max:
                span.set_status(Status(StatusCode.ERROR, f"max retries ({retry.max}) exceeded"))
            else:
                interval = Retry.get_interval(job.number_of_retries or 0, retry.intervals)
                done = job.number_of_retries or 0
                self._jobsteps_retry_scheduled(retry.max - done, interval)
        super().handle_job_retry(job, queue, retry, started_job_registry, execution)

    def handle_work_horse_killed(self, job: Job, retpid: Any, ret_val: Any, rusage: Any) -> None:
        _record_stalled(
            _domain_of(self.jobsteps_domain, job),
            job,
            f"work horse terminated unexpectedly (waitpid status {ret_val})",
            self._jobsteps_tracer(),
            source="rq.work_horse_killed",
        )
        super().handle_work_horse_killed(job, retpid, ret_val, rusage)  # type: ignore[no-untyped-call]

    def _jobsteps_set_outcome(self, outcome: str) -> None:
        # time_limit names the cause; it stays the reason when a retry follows.
        if self._jobsteps_span is not None and self._jobsteps_outcome != OUTCOME_TIME_LIMIT:
            self._jobsteps_outcome = outcome
            self._jobsteps_span.set_attribute(JOB_OUTCOME, outcome)

    def _jobsteps_retry_scheduled(self, retries_left: int | None, interval: float | None) -> None:
        self._jobsteps_set_outcome(OUTCOME_RETRY)
        context.record_event(
            EVENT_RETRY_SCHEDULED,
            tracer=self._jobsteps_tracer(),
            next_attempt=self._jobsteps_attempt + 1,
            retries_left=retries_left,
            interval_s=interval or 0,
        )


class JobStepsWorker(JobStepsWorkerMixin, Worker):
    """RQ's forking ``Worker`` recording every job run as a job attempt."""


class JobStepsSimpleWorker(JobStepsWorkerMixin, SimpleWorker):
    """RQ's in-process ``SimpleWorker`` recording every job run as a job attempt."""


def instrument(
    worker: JobStepsWorkerMixin,
    domain: str | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    flush_timeout_ms: int | None = None,
) -> JobStepsWorkerMixin:
    """Set the domain (and provider, flush timeout) of a `JobStepsWorker` instance; returns it.

    Instance settings reach fork-based work horses; for ``SpawnWorker``-style classes set
    the ``jobsteps_*`` class attributes on a subclass instead.
    """
    if not isinstance(worker, JobStepsWorkerMixin):
        raise TypeError("instrument() needs a JobStepsWorker (or a JobStepsWorkerMixin class)")
    if domain is not None:
        require_domain(domain)
        worker.jobsteps_domain = domain
    if tracer_provider is not None:
        worker.jobsteps_tracer_provider = tracer_provider
    if flush_timeout_ms is not None:
        worker.jobsteps_flush_timeout_ms = max(1, int(flush_timeout_ms))
    return worker
