"""The SQL does what the model says: random command streams, cut into random batches and
written to PostgreSQL, leave exactly the rows of applying one command at a time."""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_jobsteps._core.commands import Scope
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._pg.store import StepStore
from tests.unit.recorder_support import SCOPES, FakeClock, command, script_commands, settle, written

_domains = itertools.count()


def _rename(commands: list[Any], domain: str) -> list[Any]:
    """The same stream in a domain of its own, so examples never see each other's rows."""
    renamed: dict[Scope, Scope] = {s: s._replace(domain=domain) for s in SCOPES}
    return [c._replace(scope=renamed[c.scope]) for c in commands]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(command, max_size=30), st.sets(st.integers(0, 30)))
def test_database_rows_match_the_model(
    dsn: str, script: list[tuple[Any, ...]], cuts: set[int]
) -> None:
    domain = f"model-{next(_domains)}"
    commands = _rename(script_commands(script), domain)
    store = StepStore(dsn)
    clock = FakeClock()
    recorder = StepRecorder(debounce_ms=25, clock=clock)
    model_ops: list[tuple[str, Any]] = []
    reference = StepRecorder(debounce_ms=25, clock=clock)
    try:
        for index, item in enumerate(commands):
            clock.advance(0.01)
            for r in (recorder, reference):
                r.fire_due()
                r.handle(item)
            model_ops.extend(written(reference.take_batch()))
            if index in cuts and (batch := recorder.take_batch()):
                store.write(batch)
        for r in (recorder, reference):
            r.flush_timers()
        model_ops.extend(written(reference.take_batch()))
        if batch := recorder.take_batch():
            store.write(batch)
        expected = [
            (row.attempt, row.step_key, row.step_status, row.detail, row.message, row.ended_us)
            for row in settle(model_ops)
        ]
        with psycopg.connect(dsn) as conn:
            got = conn.execute(
                "SELECT attempt, step_key, step_status, detail, message,"
                " (extract(epoch FROM ended_at) * 1000000)::bigint"
                " FROM job_event WHERE domain = %s ORDER BY id",
                (domain,),
            ).fetchall()
    finally:
        store.close()
    assert got == expected
