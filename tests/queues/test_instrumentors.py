"""The zero-code instrumentors in-process: what they replace, what they leave, what they undo.

The real workers under ``opentelemetry-instrument`` are in test_zero_code.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("opentelemetry.instrumentation", reason="needs the instrument extra")
pytest.importorskip("celery", reason="needs the celery extra")
pytest.importorskip("rq", reason="needs the rq extra")

import rq
import rq.worker
from celery import Celery, signals

from otel_jobsteps.instrumentation import (
    JobStepsCeleryInstrumentor,
    JobStepsRQInstrumentor,
    _instrument_celery_worker,
)
from otel_jobsteps.integrations import celery as celery_integration
from otel_jobsteps.integrations.rq import JobStepsSimpleWorker, JobStepsWorker


def test_rq_worker_names_record_while_instrumented_and_come_back_after() -> None:
    original = (rq.Worker, rq.worker.Worker, rq.SimpleWorker, rq.worker.SimpleWorker)
    instrumentor = JobStepsRQInstrumentor()

    instrumentor.instrument(skip_dep_check=True)
    replaced = (rq.Worker, rq.worker.Worker, rq.SimpleWorker, rq.worker.SimpleWorker)
    instrumentor.uninstrument()

    assert replaced == (JobStepsWorker, JobStepsWorker, JobStepsSimpleWorker, JobStepsSimpleWorker)
    assert (rq.Worker, rq.worker.Worker, rq.SimpleWorker, rq.worker.SimpleWorker) == original


@pytest.mark.parametrize(
    ("explicit", "domain"),
    [pytest.param(None, "images", id="default-queue"), pytest.param("mine", "mine", id="kept")],
)
def test_celery_worker_init_instruments_an_app_unless_the_code_did(
    explicit: str | None, domain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_JOBSTEPS_DOMAIN", raising=False)
    app = Celery("instrumentor_test", set_as_current=False)
    app.conf.task_default_queue = "images"
    if explicit is not None:
        celery_integration.instrument(app, domain=explicit)

    _instrument_celery_worker(sender=SimpleNamespace(app=app))

    assert celery_integration.is_instrumented(app)
    assert celery_integration._apps[app].domain == domain


def _worker_init_receivers() -> list[object]:
    return [receiver for _, receiver in signals.worker_init.receivers]  # weak=False: objects


def test_celery_instrumentor_connects_and_disconnects_worker_init() -> None:
    instrumentor = JobStepsCeleryInstrumentor()
    instrumentor.instrument(skip_dep_check=True)
    connected = _instrument_celery_worker in _worker_init_receivers()
    instrumentor.uninstrument()

    assert connected
    assert _instrument_celery_worker not in _worker_init_receivers()


def test_bullmq_worker_wrapped_at_construction_and_the_codes_own_call_wins(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("bullmq", reason="needs the bullmq extra")
    import bullmq

    from otel_jobsteps.instrumentation import JobStepsBullMQInstrumentor
    from otel_jobsteps.integrations import bullmq as bullmq_integration

    monkeypatch.delenv("OTEL_JOBSTEPS_DOMAIN", raising=False)

    async def process(job: object, token: str) -> None:
        return None

    async def scenario() -> tuple[str, str, bool]:
        instrumentor = JobStepsBullMQInstrumentor()
        instrumentor.instrument(skip_dep_check=True)
        try:
            worker = bullmq.Worker("images", process, {"connection": redis_url, "autorun": False})
        finally:
            instrumentor.uninstrument()
        zero_code = bullmq_integration._workers[worker].domain
        bullmq_integration.instrument(worker, domain="mine")
        wrapped_once = worker.processor.__wrapped__ is process
        await worker.close()
        return zero_code, bullmq_integration._workers[worker].domain, wrapped_once

    assert asyncio.run(scenario()) == ("images", "mine", True)
