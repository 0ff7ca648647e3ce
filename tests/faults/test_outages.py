"""Outages between the writer and PostgreSQL, made with a fault proxy against a real server.

Each test points a JobStepsProcessor at the proxy and checks the promise of the README's "How
it behaves when things fail": jobs never see the outage, and once the database is back the rows
read exactly as if it had never been away (order, status, detail, span timestamps), with no
settled row overwritten, while counters, logs and metrics say what happened.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.util.types import AttributeValue

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_TYPE,
    JobStepsProcessor,
    job_attempt,
    progress,
    step,
)
from tests.faults.proxy import FaultProxy, Mode
from tests.faults.support import (
    DOMAIN,
    PASSWORD,
    STEP_COLUMNS,
    BridgeFactory,
    JobRows,
    assert_rows,
    close_open_step,
    expected_steps,
    plan,
    run_job,
    run_jobs,
    start_open_step,
    stat,
    step_rows,
)
from tests.helpers import wait_until

Conn = psycopg.Connection[Any]
OPENS_AND_CLOSES = ("SpanStarted", "SpanEnded")  # what the job thread queues
WARNING_TEXT = re.compile(r"^otel_jobsteps (\S+) \((\d+) so far\): ")


def wait_for_commands(processor: JobStepsProcessor, count: int) -> None:
    """Until the writer has taken ``count`` commands off its queue."""
    wait_until(
        lambda: stat(processor, "commands") >= count,
        what=f"{count} commands taken",
        max_interval_s=0.002,
    )


def assert_no_password(processor: JobStepsProcessor, caplog: pytest.LogCaptureFixture) -> None:
    stats = processor.stats()
    assert stats["last_error"]
    assert PASSWORD not in repr(stats)
    assert PASSWORD not in caplog.text


# -- outages: jobs unaffected, rows exact after recovery -------------------------------------


def test_refused_outage_loses_nothing_and_overwrites_nothing(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused: jobs run; after recovery every step is written in order with its own status,
    detail and timestamps, and a row someone else settled meanwhile keeps what it says."""
    b = bridge()
    before = run_job(b.tracer, "before", plan(0))
    job, render = start_open_step(b.tracer, "settled")
    assert b.processor.force_flush(10_000)

    proxy.set_mode(Mode.REFUSE)
    assert proxy.cut() == 1  # the writer's connection: it has to reconnect into the refusal
    # A sweep (or a successor) settles the open row while the writer cannot reach the database.
    settled = conn.execute(
        "UPDATE job_event SET step_status = 'FAILED', message = 'abandoned', ended_at = now()"
        f" WHERE job_id = 'settled' RETURNING {STEP_COLUMNS}"
    ).fetchall()
    closed = close_open_step(job, render, {"pct": 99})  # the sweep's close stays
    during = run_jobs(b.tracer, "during", 6)
    # "retries" is counted just after "write_failed": waiting on it sees both.
    wait_until(lambda: stat(b.processor, "retries") >= 2, what="two retries", max_interval_s=0.002)
    assert step_rows(conn, ["during-0"]) == []  # the outage is real: nothing got through
    assert stat(b.processor, "write_failed") >= 2
    assert_no_password(b.processor, caplog)

    proxy.set_mode(Mode.PASS)
    assert b.processor.force_flush(15_000)
    assert_rows(conn, [before, JobRows(settled, closed.log), *during])


def test_a_server_that_never_answers_holds_the_writer_not_the_jobs(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """Blackhole: 200 jobs finish while the writer is provably stuck in a connect the proxy
    accepted and never answered; connect_timeout ends the attempt; after recovery rows are exact."""
    proxy.set_mode(Mode.BLACKHOLE)
    b = bridge(connect_timeout_s=2)
    jobs = [run_job(b.tracer, "first", plan(0))]
    wait_until(
        lambda: proxy.accepted == 1, what="the writer's connection attempt", max_interval_s=0.002
    )
    jobs += run_jobs(b.tracer, "stuck", 200)
    # The attempt began before these jobs and has not come back: they never waited on it.
    assert stat(b.processor, "write_failed") == 0
    assert (proxy.accepted, proxy.client_bytes, proxy.server_bytes) == (1, 0, 0)

    wait_until(
        lambda: stat(b.processor, "retries") >= 1, what="the connect timeout", max_interval_s=0.002
    )
    assert stat(b.processor, "write_failed") >= 1
    assert_no_password(b.processor, caplog)
    proxy.set_mode(Mode.PASS)
    assert b.processor.force_flush(15_000)
    assert_rows(conn, jobs)


def test_a_connection_that_stops_answering_mid_run_delays_rows_not_jobs(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """Blackhole on an established connection: the writer's statement waits, jobs do not; when
    the connection answers again the held batch commits and nothing is written twice."""
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    batches = stat(b.processor, "batches_written")
    proxy.set_mode(Mode.BLACKHOLE)
    jobs += run_jobs(b.tracer, "stalled", 50)
    assert not b.processor.force_flush(300)  # the batch is out and unanswered
    assert stat(b.processor, "batches_written") == batches
    assert stat(b.processor, "write_failed") == 0
    assert step_rows(conn, ["stalled-0"]) == []

    proxy.set_mode(Mode.PASS)
    assert b.processor.force_flush(15_000)
    assert_rows(conn, jobs)
    assert proxy.accepted == 1  # the same connection carried on


def test_a_connection_dropped_mid_batch_is_written_again_whole(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """Cut: three times the connection drops right after an INSERT of a batch ran (the server
    rolls the batch back) while jobs keep coming; each batch is retried whole, rows exact."""
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    proxy.cut_when(server_sends=b"INSERT 0 ", times=3)
    jobs += run_jobs(b.tracer, "cut", 30)
    assert b.processor.force_flush(15_000)
    assert proxy.cuts_pending() == 0
    assert stat(b.processor, "write_failed") == 3
    # A backend slow to notice the cut answers txid_status "in progress": one more retry.
    assert stat(b.processor, "retries") >= 3
    assert_no_password(b.processor, caplog)
    assert_rows(conn, jobs)


def test_a_lost_commit_acknowledgement_does_not_write_rows_twice(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """Cut after COMMIT, twice: the server committed, the writer never heard and wrote the
    batch again; every step must still be there exactly once.

    The jobs queue up while the writer waits on a blackholed connection, so the second
    committed batch surely holds whole jobs (steps inserted already closed).
    """
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    proxy.set_mode(Mode.BLACKHOLE)
    jobs += run_jobs(b.tracer, "ack", 5)
    proxy.cut_when(server_sends=b"COMMIT\x00", times=2)
    proxy.set_mode(Mode.PASS)
    assert b.processor.force_flush(15_000)
    assert proxy.cuts_pending() == 0
    assert stat(b.processor, "write_failed") == 2
    assert_rows(conn, jobs)


def test_a_backend_killed_mid_run_is_reconnected(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    """Server-side kill (as in a restart) while a step is open: the step's later progress and
    close, and the jobs after it, are written on a new connection, exactly."""
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    job, render = start_open_step(b.tracer, "killed")
    assert b.processor.force_flush(10_000)
    # pg_terminate_backend in the select list: it runs only for the rows the filter kept.
    killed = conn.execute(
        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'otel_jobsteps' AND datname = current_database()"
    ).fetchall()
    assert [terminated for _, terminated in killed] == [True]
    wait_until(
        what="the killed backend to exit",
        probe=lambda: (
            not conn.execute(
                "SELECT FROM pg_stat_activity WHERE pid = %s", (killed[0][0],)
            ).fetchall()
        ),
    )
    closed = close_open_step(job, render, {"pct": 80})
    after = run_jobs(b.tracer, "after", 5)
    assert b.processor.force_flush(15_000)
    assert stat(b.processor, "write_failed") >= 1
    assert stat(b.processor, "retries") >= 1
    assert_no_password(b.processor, caplog)
    assert_rows(conn, [*jobs, closed, *after])
    assert proxy.accepted == 2  # one reconnect, through the same proxy


def test_a_slow_server_delays_rows_not_jobs(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """Slow (+200 ms per server reply): the jobs are done before the writer committed them,
    and the rows arrive complete and exact, with no failure counted."""
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    proxy.set_mode(Mode.SLOW)
    slow = run_jobs(b.tracer, "slow", 30)
    written_when_jobs_done = len(step_rows(conn, [f"slow-{n}" for n in range(30)]))
    assert written_when_jobs_done < len(expected_steps(slow))
    assert b.processor.force_flush(30_000)
    assert proxy.delayed_chunks >= 2
    assert stat(b.processor, "write_failed") == 0
    assert_rows(conn, jobs + slow)


# -- bounded memory, backoff, quiet logs, metrics ---------------------------------------------


def test_a_full_queue_holds_only_opens_and_closes_and_invents_nothing(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """max_queue_size=1000 with the writer held: progress never takes a place in the queue (the
    writer reads it from the running span), so the queue fills with exactly 1000 span starts
    and ends, never more, and a close whose open was dropped writes no row."""
    proxy.set_mode(Mode.BLACKHOLE)
    b = bridge(max_queue_size=1000, connect_timeout_s=30)
    run_job(b.tracer, "first", plan(0))
    wait_until(lambda: proxy.accepted == 1, what="the writer to be held", max_interval_s=0.002)
    # Held in its connect, the writer takes nothing more: what it had not taken of job "first"
    # when it woke (a loaded machine wakes it early) keeps its places in the queue.
    held = stat(b.processor, "queued")
    longest = 0
    first_drop: int | None = None
    jobs = 300  # four queued items each (job and step, start and end): past the bound
    for n in range(jobs):
        with (
            job_attempt(DOMAIN, f"shed-{n}", "t", tracer=b.tracer),
            step("RENDER", tracer=b.tracer),
        ):
            for pct in range(20):
                progress(pct=pct)
                longest = max(longest, b.processor.stats()["queued"])
        stats = b.processor.stats()
        longest = max(longest, stats["queued"])
        if first_drop is None and any(stats.get(f"dropped_{kind}") for kind in OPENS_AND_CLOSES):
            first_drop = n
    assert first_drop == (1000 - held) // 4  # the jobs that fit whole: progress took no place
    assert longest == 1000  # full, never over
    assert "dropped_ProgressReported" not in b.processor.stats()

    dropped_opens = stat(b.processor, "dropped_SpanStarted")
    orphan_job, orphan_step = start_open_step(b.tracer, "orphan")
    assert stat(b.processor, "dropped_SpanStarted") == dropped_opens + 2  # its job and step
    proxy.set_mode(Mode.PASS)
    assert b.processor.force_flush(30_000)
    orphan_step.end()  # its open was dropped: this close must not make up a row
    orphan_job.end()
    assert b.processor.force_flush(10_000)
    assert step_rows(conn, ["orphan"]) == []
    ((shed_rows, statuses),) = conn.execute(
        "SELECT count(*), array_agg(DISTINCT step_status) FROM job_event WHERE job_id LIKE 'shed-%'"
    ).fetchall()
    # One row per job whose job and step starts both made it into the queue (a dropped job
    # start also silences its step): between one and two drops per missing row.
    assert jobs - dropped_opens <= shed_rows <= jobs - (dropped_opens + 1) // 2
    assert set(statuses) <= {"COMPLETED", "RUNNING"}


def test_reconnect_attempts_back_off(bridge: BridgeFactory, proxy: FaultProxy) -> None:
    """Refused: every job wakes the writer, yet after its k-th failed attempt it waits at least
    the jittered backoff, half of 0.1 s * 2**(k-1), which doubles each time (not a fixed pause)."""
    proxy.set_mode(Mode.REFUSE)
    # Attempt k (the k-th connection the proxy accepted) happened after the last look that saw
    # fewer and before the first look that saw k: bounds that only widen on a loaded machine.
    attempts = range(1, 7)
    started = time.monotonic()
    before = dict.fromkeys(attempts, started)
    seen_by: dict[int, float] = {}
    b = bridge()
    jobs = 0
    while len(seen_by) < len(attempts):
        assert time.monotonic() < started + 30, "the writer stopped trying"
        with job_attempt(DOMAIN, f"b-{jobs}", "t", tracer=b.tracer), step("S", tracer=b.tracer):
            pass
        jobs += 1
        # Each job is one wake-up of the writer: wait until it took the job's four commands.
        wait_for_commands(b.processor, 4 * jobs)
        looked = time.monotonic()
        accepted = proxy.accepted
        for attempt in attempts:
            if accepted < attempt:
                before[attempt] = looked
            else:
                seen_by.setdefault(attempt, time.monotonic())
    wait_until(
        lambda: stat(b.processor, "retries") >= 6,
        what="the sixth attempt's retry",
        max_interval_s=0.002,
    )
    stats = b.processor.stats()
    assert stats["retries"] == stats["write_failed"] == proxy.accepted == 6
    for k in attempts[:-1]:
        # Not sooner than the retry the k-th failure scheduled (a fixed 0.1 s pause fails k=3).
        assert seen_by[k + 1] - before[k] >= 0.1 * 2 ** (k - 1) / 2, (k, before, seen_by)


def test_warnings_are_rate_limited_with_running_counts(
    bridge: BridgeFactory, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Many failures of two kinds log at most a couple of warnings per kind, each carrying its
    running count, and none shows the password."""
    caplog.set_level(logging.WARNING, logger="otel_jobsteps")
    proxy.set_mode(Mode.REFUSE)
    b = bridge()
    run_job(b.tracer, "w", plan(0))
    for n in range(50):  # job.attempt 0 is invalid: counted and ignored
        attributes: dict[str, AttributeValue] = {
            JOB_DOMAIN: DOMAIN,
            JOB_ID: f"bad-{n}",
            JOB_TYPE: "t",
            JOB_ATTEMPT: 0,
        }
        b.tracer.start_span("job", attributes=attributes).end()
    wait_until(
        lambda: stat(b.processor, "retries") >= 5, what="five failed writes", max_interval_s=0.002
    )
    warnings = [
        record
        for record in caplog.records
        if record.name == "otel_jobsteps" and record.levelno == logging.WARNING
    ]
    parsed = [WARNING_TEXT.match(record.getMessage()) for record in warnings]
    assert all(parsed), [record.getMessage() for record in warnings]
    per_kind = Counter(match.group(1) for match in parsed if match)
    assert set(per_kind) >= {"write_failed", "invalid_job_span"}
    assert max(per_kind.values()) <= 2, per_kind
    for match in parsed:
        assert match is not None
        assert 1 <= int(match.group(2)) <= stat(b.processor, match.group(1))
    assert stat(b.processor, "invalid_job_span") == 50
    assert PASSWORD not in caplog.text


def test_metrics_report_what_stats_report(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """With a MeterProvider, retries, problems{kind=write_failed}, dropped{kind} and the queue
    length read the same numbers as stats(), taken while the writer is held still."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    try:
        proxy.set_mode(Mode.BLACKHOLE)
        b = bridge(meter_provider=meter_provider, max_queue_size=100, connect_timeout_s=30)
        run_job(b.tracer, "first", plan(0))
        wait_until(lambda: proxy.accepted == 1, what="the writer to be held", max_interval_s=0.002)
        run_jobs(b.tracer, "overflow", 40)  # past 100 queued commands: drops of several kinds
        assert proxy.cut() == 1  # the held attempt fails: one write_failed, one retry
        wait_until(lambda: proxy.accepted == 2, what="the retry to be held", max_interval_s=0.002)
        run_jobs(b.tracer, "queued", 3)  # these wait in the queue while the writer is held
        stats = b.processor.stats()
        observed = observe(reader)
        assert b.processor.stats() == stats  # nothing moved while the metrics were read
        assert stats["queued"] > 0
        assert stats["write_failed"] == 1
        assert observed["otel_jobsteps.retries", ""] == stats["retries"] == 1
        assert observed["otel_jobsteps.problems", "write_failed"] == stats["write_failed"]
        assert observed["otel_jobsteps.queue.length", ""] == stats["queued"]
        dropped = {
            name.removeprefix("dropped_"): value
            for name, value in stats.items()
            if name.startswith("dropped_")
        }
        assert {"SpanStarted", "SpanEnded"} <= set(dropped)
        assert {
            kind: value
            for (name, kind), value in observed.items()
            if name == "otel_jobsteps.dropped"
        } == dropped
        proxy.set_mode(Mode.PASS)
        assert b.processor.force_flush(15_000)
    finally:
        meter_provider.shutdown()


def observe(reader: InMemoryMetricReader) -> dict[tuple[str, str], int | float]:
    """(instrument, kind attribute or "") -> value, from one collection."""
    data = reader.get_metrics_data()
    assert data is not None
    values: dict[tuple[str, str], int | float] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    kind = str((point.attributes or {}).get("kind", ""))
                    values[metric.name, kind] = point.value  # type: ignore[union-attr]
    return values


# -- heartbeats -------------------------------------------------------------------------------


def heartbeat(conn: Conn, job_id: str) -> Any:
    row = conn.execute("SELECT heartbeat_at FROM job_event WHERE job_id = %s", (job_id,)).fetchone()
    return None if row is None else row[0]


def test_heartbeats_advance_while_open_and_stop_at_close(bridge: BridgeFactory, conn: Conn) -> None:
    """heartbeat_interval_s=0.2: an open step's heartbeat_at is set and advances; once the step
    is closed, later heartbeats (for another open step) leave it as it was."""
    b = bridge(heartbeat_interval_s=0.2)
    job, render = start_open_step(b.tracer, "beating")
    assert b.processor.force_flush(10_000)
    wait_until(
        lambda: heartbeat(conn, "beating") is not None,
        what="a first heartbeat",
        max_interval_s=0.002,
    )
    first = heartbeat(conn, "beating")
    wait_until(
        lambda: heartbeat(conn, "beating") > first,
        what="the heartbeat to advance",
        max_interval_s=0.002,
    )

    other_job, other_step = start_open_step(b.tracer, "still-open")
    render.end()
    job.end()
    assert b.processor.force_flush(10_000)
    at_close = heartbeat(conn, "beating")
    beats = stat(b.processor, "heartbeats")
    wait_until(
        lambda: stat(b.processor, "heartbeats") >= beats + 2,
        what="two more heartbeats",
        max_interval_s=0.002,
    )
    still_open = heartbeat(conn, "still-open")
    assert still_open is not None
    assert still_open > at_close
    assert heartbeat(conn, "beating") == at_close
    other_step.end()
    other_job.end()
    assert b.processor.force_flush(10_000)
