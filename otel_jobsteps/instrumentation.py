"""Zero-code setup: ``opentelemetry-instrument <worker command>`` records job steps.

One instrumentor per queue (as its adapter's ``instrument()``), and a post-instrument hook that
adds `JobStepsProcessor` when ``OTEL_JOBSTEPS_DSN`` is set; both run before a prefork pool forks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from ._telemetry.log import logger
from .auto import DOMAIN_VARIABLE

__all__ = [
    "JobStepsArqInstrumentor",
    "JobStepsBullMQInstrumentor",
    "JobStepsCeleryInstrumentor",
    "JobStepsRQInstrumentor",
]


def _domain(default: str) -> str:
    return os.environ.get(DOMAIN_VARIABLE) or default


class _Patch:
    """Replaced attributes of modules or classes, put back by `restore`."""

    def __init__(self) -> None:
        self._saved: list[tuple[object, str, object]] = []

    def replace(self, owner: object, name: str, value: object) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def wrap_init(self, cls: type, after: Callable[[Any], None]) -> None:
        """Run ``after(instance)`` at the end of every ``cls(...)``; its failure is logged."""
        original = cls.__init__  # type: ignore[misc]

        @functools.wraps(original)
        def init(instance: Any, *args: Any, **kwargs: Any) -> None:
            original(instance, *args, **kwargs)
            try:
                after(instance)
            except Exception as error:  # noqa: BLE001 - never break the queue's own constructor
                logger.warning("instrumenting %s failed: %s", cls.__name__, error)

        self.replace(cls, "__init__", init)

    def restore(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)


class _PatchingInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """An instrumentor whose `_uninstrument` undoes what its `_instrument` replaced."""

    _patch: _Patch

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._patch = _Patch()  # one per instrumentor: each undoes only its own

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patch.restore()


class JobStepsCeleryInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Every Celery app a worker starts records each task run as a job attempt.

    Domain: ``OTEL_JOBSTEPS_DOMAIN``, else the app's default queue name. An app the code
    instrumented itself keeps its own settings.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("celery >= 5.3, < 6",)

    def _instrument(self, **kwargs: Any) -> None:
        from celery import signals

        signals.worker_init.connect(_instrument_celery_worker, weak=False)

    def _uninstrument(self, **kwargs: Any) -> None:
        from celery import signals

        signals.worker_init.disconnect(_instrument_celery_worker)


def _instrument_celery_worker(sender: Any = None, **_: Any) -> None:
    from .integrations import celery

    app = getattr(sender, "app", None)
    if app is not None and not celery.is_instrumented(app):
        celery.instrument(app, domain=_domain(str(app.conf.task_default_queue or "celery")))


class JobStepsRQInstrumentor(_PatchingInstrumentor):
    """``rq worker`` (and code that builds ``rq.Worker``/``rq.SimpleWorker``) records jobs.

    The two names are rebound to `JobStepsWorker` and `JobStepsSimpleWorker`, so the CLI's
    default worker class and classes imported after start-up record; domain:
    ``OTEL_JOBSTEPS_DOMAIN``, else the job's queue name.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("rq >= 3.0, < 4",)

    def _instrument(self, **kwargs: Any) -> None:
        import rq
        import rq.worker

        from .integrations.rq import JobStepsSimpleWorker, JobStepsWorker

        for name, recording in (("Worker", JobStepsWorker), ("SimpleWorker", JobStepsSimpleWorker)):
            self._patch.replace(rq, name, recording)
            self._patch.replace(rq.worker, name, recording)


class JobStepsArqInstrumentor(_PatchingInstrumentor):
    """Every arq ``Worker`` wraps its functions to record each run as a job attempt.

    Domain: ``OTEL_JOBSTEPS_DOMAIN``, else the worker's queue name.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("arq >= 0.26, < 0.29",)

    def _instrument(self, **kwargs: Any) -> None:
        from arq.worker import Worker

        self._patch.wrap_init(Worker, _instrument_arq_worker)


def _instrument_arq_worker(worker: Any) -> None:
    from arq.cron import CronJob

    from .integrations.arq import instrument_function

    domain = _domain(str(worker.queue_name))
    for name, function in list(worker.functions.items()):
        if isinstance(function, CronJob):
            continue  # scheduled by the worker itself, not a queued job with tries
        worker.functions[name] = instrument_function(
            function, domain, default_timeout_s=worker.job_timeout_s, retry_jobs=worker.retry_jobs
        )


class JobStepsBullMQInstrumentor(_PatchingInstrumentor):
    """Every BullMQ ``Worker`` records each run of its processor as a job attempt.

    Domain: ``OTEL_JOBSTEPS_DOMAIN``, else the worker's queue name.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("bullmq >= 3.4, < 4",)

    def _instrument(self, **kwargs: Any) -> None:
        import bullmq

        self._patch.wrap_init(bullmq.Worker, _instrument_bullmq_worker)


def _instrument_bullmq_worker(worker: Any) -> None:
    from .integrations.bullmq import instrument

    instrument(worker, _domain(str(worker.name)))
