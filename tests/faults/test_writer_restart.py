"""A writer process that dies while the database is away (issue 22): the new one is told the
spans still open, so a step whose start the dead one never committed is written too, once the
database is back, and the attempt closes as it ends."""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg

from otel_jobsteps import JobStepsProcessor, job_attempt, progress, step
from tests.faults.proxy import FaultProxy, Mode
from tests.faults.support import DOMAIN, BridgeFactory
from tests.helpers import rows, wait_until, writer_processes

STEPS = "SELECT step_key, step_status, detail FROM job_event WHERE type = 'STEP' ORDER BY id"


def _kill(processor: JobStepsProcessor, writer: int) -> None:
    os.kill(writer, signal.SIGKILL)
    wait_until(lambda: processor.stats().get("writer_process_exited"), what="the death noticed")


def test_a_writer_process_restarted_while_the_database_is_down(
    bridge: BridgeFactory, proxy: FaultProxy, conn: psycopg.Connection[Any]
) -> None:
    others = set(writer_processes())
    b = bridge(writer="process", debounce_ms=0)
    tracer, processor = b.tracer, b.processor
    with job_attempt(DOMAIN, "down", "t", tracer=tracer):
        with step("FETCH", tracer=tracer):
            pass
        assert processor.force_flush(10_000)
        (writer,) = set(writer_processes()) - others
        proxy.set_mode(Mode.REFUSE)
        proxy.cut()  # the database is gone: the connection too
        with step("RENDER", tracer=tracer):
            progress(pct=10)
            assert not processor.force_flush(300)  # held by a writer process about to die
            _kill(processor, writer)
            progress(pct=70)
            assert not processor.force_flush(300)  # the new one cannot write either
        with step("SAVE", tracer=tracer):
            pass
    proxy.set_mode(Mode.PASS)
    assert processor.force_flush(30_000)

    assert rows(conn, STEPS) == [
        ("FETCH", "COMPLETED", None),
        ("RENDER", "COMPLETED", {"pct": 70}),
        ("SAVE", "COMPLETED", None),
    ]
    assert rows(conn, "SELECT status FROM job_log") == [("COMPLETED",)]
    assert processor.stats()["writer_process_exited"] == 1
