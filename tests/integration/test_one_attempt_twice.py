"""A batch may name one attempt twice in one guarded statement (two runs of an attempt under
one execution id): the statement writes what writing the inputs one after the other would.

Found by review: the array shape of the guarded updates once let the last input for a step
decide alone, so a close whose guard failed hid one whose guard held (the step stayed open)."""

from __future__ import annotations

from typing import Any

import psycopg

from otel_jobsteps._core.batch import CloseForeign, CloseStep, Progress
from otel_jobsteps._pg.store import statement_params
from otel_jobsteps.sql import qualified_queries

AT_US = 1_900_000_000_000_000


def _open_step(conn: psycopg.Connection[Any], job_id: str, execution_id: str = "x") -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " execution_id) VALUES ('d', %s, 't', 1, 'STEP', 'A', 'RUNNING', %s)",
        (job_id, execution_id),
    )


def _run(conn: psycopg.Connection[Any], statement: str, ops: list[Any]) -> int:
    query = qualified_queries("queries.sql", "public")[statement]
    return conn.execute(query, statement_params(ops, 65_536)).rowcount


def _step(conn: psycopg.Connection[Any], job_id: str) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT step_status, detail, message, ended_at IS NOT NULL FROM job_event"
        " WHERE job_id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _close(key: str, status: str, who: str, job_id: str) -> CloseStep:
    return CloseStep("d", job_id, 1, "x", key, status, {"who": who}, None, AT_US)


def test_a_close_whose_guard_holds_wins_over_one_whose_guard_fails(
    conn: psycopg.Connection[Any],
) -> None:
    _open_step(conn, "right-first")
    _open_step(conn, "wrong-first")
    right_first = [_close("A", "COMPLETED", "A", "right-first"),
                   _close("B", "FAILED", "B", "right-first")]  # fmt: skip
    wrong_first = [_close("B", "FAILED", "B", "wrong-first"),
                   _close("A", "COMPLETED", "A", "wrong-first")]  # fmt: skip
    assert _run(conn, "close_steps", right_first + wrong_first) == 2
    for job_id in ("right-first", "wrong-first"):
        assert _step(conn, job_id) == ("COMPLETED", {"who": "A"}, None, True)


def test_of_two_closes_that_both_hold_the_first_wins(conn: psycopg.Connection[Any]) -> None:
    _open_step(conn, "j")
    ops = [_close("A", "COMPLETED", "first", "j"), _close("A", "FAILED", "second", "j")]
    assert _run(conn, "close_steps", ops) == 1
    assert _step(conn, "j") == ("COMPLETED", {"who": "first"}, None, True)


def test_of_two_progress_writes_the_later_wins(conn: psycopg.Connection[Any]) -> None:
    _open_step(conn, "j")
    ops = [Progress("d", "j", 1, "x", "A", {"p": 1}), Progress("d", "j", 1, "x", "A", {"p": 2})]
    assert _run(conn, "write_progress", ops) == 1
    assert _step(conn, "j") == ("RUNNING", {"p": 2}, None, False)


def test_many_steps_named_twice_keep_each_input_with_its_own_step(
    conn: psycopg.Connection[Any],
) -> None:
    """Every input's values land on its own step, however the ties among repeated attempts
    sort (each of the parallel arrays is built from one input per step)."""
    jobs = [f"j{n}" for n in range(200)]
    for job_id in jobs:
        _open_step(conn, job_id)
    ops = [op for job_id in jobs for op in (_close("Z", "FAILED", "zombie", job_id),
                                            _close("A", "COMPLETED", job_id, job_id))]  # fmt: skip
    assert _run(conn, "close_steps", ops) == len(jobs)
    for job_id in jobs:
        assert _step(conn, job_id) == ("COMPLETED", {"who": job_id}, None, True)


def test_a_foreign_close_named_twice_closes_once(conn: psycopg.Connection[Any]) -> None:
    _open_step(conn, "j", execution_id="zombie")
    ops = [CloseForeign("d", "j", 1, "zombie", AT_US), CloseForeign("d", "j", 1, "new", AT_US)]
    assert _run(conn, "close_foreign_steps", ops) == 1
    assert _step(conn, "j") == ("FAILED", None, "abandoned", True)
