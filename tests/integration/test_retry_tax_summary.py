"""The retry tax's summaries (migrations 0019 and 0022): job_retry_tax read from
job_failed_step and job_retried_success gives what migration 0017's function, reading every
failed attempt's step rows, gives, on random histories changed as the doors, sweep and prune
change them, and job_retried_success holds what 0017's reads find per retried completion; an
upgrade from 0018 fills them from the rows kept."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from benchmarks.retry_tax import REFERENCE, function_0017, same_rows
from otel_jobsteps import migrate
from otel_jobsteps.maintenance import prune
from otel_jobsteps.schema import migrations
from tests.helpers import rows

NOW = datetime.now(timezone.utc).replace(microsecond=0)
KEYS = ("FETCH", "RENDER", "SAVE")


def _step(
    rng: random.Random, at: datetime, last: bool
) -> tuple[str, datetime, datetime | None, str]:
    """A STEP row's key, start, end (None: still open, the attempt's last only) and status."""
    ended = at + timedelta(milliseconds=rng.randrange(1, 90_000))
    if last and rng.random() < 0.1:
        return rng.choice(KEYS), at, None, "RUNNING"
    return rng.choice(KEYS), at, ended, rng.choice(("COMPLETED", "COMPLETED", "FAILED"))


def write_history(conn: psycopg.Connection[Any], seed: int, jobs: int = 80) -> None:
    """Random attempts over the last 40 days: steps (some repeated, some open; a log line before
    them at times, some attempts only that), then a final row (FAILED, COMPLETED or none; a NULL
    job type or detail step at times), each attempt in one transaction, its final row written
    before its steps in one in five."""
    rng = random.Random(seed)
    for job in range(jobs):
        at = NOW - timedelta(days=40) + timedelta(minutes=rng.randrange(0, 40 * 24 * 60))
        job_type = rng.choice(("thumbnail", "invoice"))
        for attempt in range(1, rng.randrange(2, 6)):
            at += timedelta(seconds=rng.randrange(0, 600))  # the backoff
            count = rng.randrange(5)
            steps = [_step(rng, at + timedelta(seconds=10 * n), n == count - 1)
                     for n in range(count)]  # fmt: skip
            end = max([at, *(e or s for _, s, e, _ in steps)]) + timedelta(seconds=1)
            status = rng.choice(("FAILED", "FAILED", "COMPLETED", "COMPLETED", None))
            failing = rng.choice((*KEYS, None, ""))
            detail = None if failing == "" else Jsonb({"step": failing})
            final = (
                "INSERT INTO job_log (domain, job_id, job_type, attempt, status, detail,"
                " created_at) VALUES ('d', %s, %s, %s, %s, %s, %s)",
                (f"j{job}", rng.choice((job_type, job_type, None)), attempt, status, detail, end),
            )
            first = rng.random() < 0.2
            with conn.transaction():
                if status and first:
                    conn.execute(*final)
                if rng.random() < 0.3:  # a log line before the steps: no attempt's start
                    conn.execute(
                        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, message,"
                        " created_at) VALUES ('d', %s, %s, %s, 'LOG', 'starting', %s)",
                        (f"j{job}", job_type, attempt, at - timedelta(seconds=3)),
                    )
                for key, started, ended, step_status in steps:
                    conn.execute(
                        "INSERT INTO job_event (domain, job_id, job_type, attempt, type,"
                        " step_key, step_status, created_at, ended_at)"
                        " VALUES ('d', %s, %s, %s, 'STEP', %s, %s, %s, %s)",
                        (f"j{job}", job_type, attempt, key, step_status, started, ended),
                    )
                if status and not first:
                    conn.execute(*final)
            at = end


def change_history(conn: psycopg.Connection[Any], seed: int) -> None:
    """What the doors and maintenance do to written rows: a final row made FAILED abandoned and
    dated earlier (collect's abandon of a settled attempt), an attempt's rows forgotten and
    derived again (collect), a step closed with its attempt's final row changed in the same
    statement (sweep), a job's first attempt deleted with its later ones kept (prune's cutoff
    through a job), and prune's deletions of the oldest attempts."""
    rng = random.Random(seed)
    ids = [i for (i,) in rows(conn, "SELECT id FROM job_log ORDER BY id")]
    for log_id in rng.sample(ids, 10):
        conn.execute(
            "UPDATE job_log SET status = 'FAILED', reason = 'abandoned',"
            " created_at = created_at - interval '30 s',"
            " detail = jsonb_build_object('step', 'SAVE') WHERE id = %s",
            (log_id,),
        )
    for log_id in rng.sample(ids, 10):
        with conn.transaction():
            found = conn.execute(
                "DELETE FROM job_log WHERE id = %s RETURNING domain, job_id, attempt, status,"
                " created_at",
                (log_id,),
            ).fetchone()
            if found is None:
                continue
            domain, job_id, attempt, status, created_at = found
            conn.execute(
                "INSERT INTO job_log (domain, job_id, attempt, status, created_at)"
                " VALUES (%s, %s, %s, %s, %s)",
                (domain, job_id, attempt, "FAILED" if status == "COMPLETED" else status,
                 created_at),
            )  # fmt: skip
            conn.execute(
                "UPDATE job_event SET ended_at = created_at + interval '2 s'"
                " WHERE domain = %s AND job_id = %s AND attempt = %s AND type = 'STEP'",
                (domain, job_id, attempt),
            )
    conn.execute(
        "WITH closed AS (UPDATE job_event SET ended_at = created_at + interval '5 s',"
        " step_status = 'FAILED', message = 'abandoned' WHERE type = 'STEP' AND ended_at IS NULL"
        " RETURNING domain, job_id, attempt)"
        " UPDATE job_log AS l SET created_at = l.created_at + interval '1 s' FROM closed AS c"
        " WHERE (l.domain, l.job_id, l.attempt) = (c.domain, c.job_id, c.attempt)"
    )
    jobs = sorted({job_id for (job_id,) in rows(conn, "SELECT DISTINCT job_id FROM job_log")})
    for job_id in rng.sample(jobs, 10):
        with conn.transaction():  # prune's cut through a job: its first attempt's rows only
            for table in ("job_event", "job_log"):
                conn.execute(
                    sql.SQL(
                        "DELETE FROM {} WHERE domain = 'd' AND job_id = %s AND attempt = 1"
                    ).format(sql.Identifier(table)),
                    (job_id,),
                )
    prune(conn, timedelta(days=35), batch_size=7)


# Per completion that followed failures, as 0017's function finds it at each call (each failure's
# next completion, the job's previous one, its first attempt's start): what job_retried_success
# must hold.
RETRIED_SUCCESS = """
SELECT r.domain, r.job_id, r.attempt, r.failed_at, r.job_type,
       extract(epoch FROM job_duration(s.started_at, r.created_at))::double precision
FROM (
    SELECT c.domain, c.job_id, c.attempt, c.job_type, c.created_at, max(f.created_at) AS failed_at
    FROM job_log AS f
    CROSS JOIN LATERAL (
        SELECT n.domain, n.job_id, n.attempt, n.job_type, n.created_at
        FROM job_log AS n
        WHERE n.domain = f.domain AND n.job_id = f.job_id AND n.attempt > f.attempt
          AND n.status = 'COMPLETED'
        ORDER BY n.attempt
        LIMIT 1
    ) AS c
    WHERE f.status = 'FAILED'
    GROUP BY c.domain, c.job_id, c.attempt, c.job_type, c.created_at
) AS r
CROSS JOIN LATERAL (
    SELECT min(e.created_at) AS started_at
    FROM job_event AS e
    WHERE e.domain = r.domain AND e.job_id = r.job_id AND e.type <> 'LOG'
      AND e.attempt = (
          SELECT min(a.attempt) FROM job_event AS a
          WHERE a.domain = r.domain AND a.job_id = r.job_id
            AND a.attempt > COALESCE(
                (SELECT max(p.attempt) FROM job_log AS p
                 WHERE p.domain = r.domain AND p.job_id = r.job_id
                   AND p.status = 'COMPLETED' AND p.attempt < r.attempt), 0))
) AS s
WHERE s.started_at IS NOT NULL
ORDER BY 1, 2, 3
"""


def assert_summaries_kept(conn: psycopg.Connection[Any]) -> None:
    """Both summaries hold what reading the rows as they are now gives."""
    assert rows(conn, "SELECT count(*) FROM job_failed_step WHERE failed_attempts = 1") == rows(
        conn, "SELECT count(*) FROM job_log WHERE status = 'FAILED'"
    )
    kept = rows(
        conn,
        "SELECT domain, job_id, attempt, failed_at, job_type, seconds FROM job_retried_success"
        " ORDER BY 1, 2, 3",
    )
    assert same_rows(kept, rows(conn, RETRIED_SUCCESS))


def windows() -> list[datetime | None]:
    return [None, *(NOW - timedelta(days=d) for d in (45, 38, 30, 20, 7, 1))]


def answers(conn: psycopg.Connection[Any], function: str) -> list[list[tuple[Any, ...]]]:
    """``function``'s rows for each window, in order."""
    query = sql.SQL("SELECT * FROM {}(%s) ORDER BY 1, 2").format(
        sql.Identifier(*function.split("."))
    )
    return [conn.execute(query, (since,)).fetchall() for since in windows()]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_summary_answers_what_reading_every_step_row_answered(
    conn: psycopg.Connection[Any], seed: int
) -> None:
    conn.execute(function_0017())
    write_history(conn, seed)
    before = answers(conn, REFERENCE)
    assert any(len(found) > 3 for found in before)  # failures in several types and steps
    assert same_rows(answers(conn, "job_retry_tax"), before)
    assert rows(conn, "SELECT count(*) > 5 FROM job_retried_success") == [(True,)]
    assert_summaries_kept(conn)

    change_history(conn, seed)
    changed = answers(conn, REFERENCE)
    assert changed != before
    assert same_rows(answers(conn, "job_retry_tax"), changed)
    assert_summaries_kept(conn)


def test_an_upgrade_from_0018_fills_the_summary_from_the_rows_kept(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with conn.transaction():  # what migrate applied up to 0018
            conn.execute(
                "CREATE TABLE otel_jobsteps_migration (version integer PRIMARY KEY,"
                " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version, name, text in migrations():
                if version < 19:
                    conn.execute(text)
                    conn.execute(
                        "INSERT INTO otel_jobsteps_migration (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
        write_history(conn, seed=4)
        before = answers(conn, "job_retry_tax")  # 0017's function
        assert any(before)

        assert migrate(conn)[0] == 19  # and the migrations after it

        assert same_rows(answers(conn, "job_retry_tax"), before)
        assert same_rows([rows(conn, "SELECT * FROM job_retry_tax ORDER BY 1, 2")], before[:1])
        assert_summaries_kept(conn)
