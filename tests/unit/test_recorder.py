"""The sequential model and the debounce, with an injectable clock and no database."""

from __future__ import annotations

import pytest

from otel_jobsteps._core.batch import CloseForeign, CloseStep, EventRow, JobLogRow, Progress
from otel_jobsteps._core.commands import (
    JobEnded,
    JobStarted,
    ProgressReported,
    StepEnded,
    StepStarted,
)
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps.errors import ConfigurationError
from tests.unit.recorder_support import MS, Driver, FakeClock, scope, settle, written


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder(clock: FakeClock) -> StepRecorder:
    return StepRecorder(debounce_ms=1000, clock=clock)


@pytest.fixture
def job(recorder: StepRecorder) -> Driver:
    driver = Driver(recorder, scope())
    driver.start_job()
    return driver


def step_rows(recorder: StepRecorder) -> list[EventRow]:
    return [op for name, op in written(recorder.take_batch()) if isinstance(op, EventRow)]


def test_a_step_opened_and_closed_within_one_batch_is_one_closed_insert(
    recorder: StepRecorder, job: Driver
) -> None:
    job.start("RENDER", 1)
    job.progress("RENDER", pct=40)
    job.end("RENDER", 5)
    ops = written(recorder.take_batch())
    assert [name for name, _ in ops] == ["close_foreign_steps", "insert_events"]
    row = ops[1][1]
    assert (row.step_key, row.step_status, row.detail) == ("RENDER", "COMPLETED", {"pct": 40})
    assert (row.created_us, row.ended_us) == (1000, 5000)


def test_same_step_reuses_the_open_row(recorder: StepRecorder, job: Driver) -> None:
    job.start("RENDER", 1)
    job.start("RENDER", 2)  # a nested span with the same key: no second row
    job.end("RENDER", 3)
    assert recorder.take_batch() is not None
    job.end("RENDER", 4)  # the outer span releases the row
    closes = [op for _, op in written(recorder.take_batch())]
    assert closes == [
        CloseStep(
            "render", "42", 1, closes[0].execution_id, "RENDER", "COMPLETED", None, None, 4000
        )
    ]


def test_next_step_closes_the_open_one_as_completed(recorder: StepRecorder, job: Driver) -> None:
    job.start("RENDER", 1)
    recorder.take_batch()
    job.start("SAVE", 7)
    ops = written(recorder.take_batch())
    close = next(op for _, op in ops if isinstance(op, CloseStep))
    assert (close.step_key, close.status, close.ended_us) == ("RENDER", "COMPLETED", 7000)
    names = [name for name, _ in ops]
    assert names.index("close_steps") < names.index("insert_events")


def test_step_failure_keeps_latest_progress_and_error(recorder: StepRecorder, job: Driver) -> None:
    job.start("SAVE", 1)
    job.progress("SAVE", pct=10)
    job.end("SAVE", 2, failed=True, error="OSError: disk full")
    (row,) = step_rows(recorder)
    assert (row.step_status, row.detail, row.message) == (
        "FAILED",
        {"pct": 10},
        "OSError: disk full",
    )


def test_first_progress_is_written_at_once_then_debounced(
    recorder: StepRecorder, job: Driver, clock: FakeClock
) -> None:
    job.start("RENDER", 1)
    recorder.take_batch()
    job.progress("RENDER", pct=1)
    assert [op.detail for _, op in written(recorder.take_batch())] == [{"pct": 1}]
    clock.advance(0.2)
    job.progress("RENDER", pct=2)
    clock.advance(0.2)
    job.progress("RENDER", pct=3)
    assert recorder.take_batch() is None  # inside the window: nothing written yet
    assert recorder.next_due() == pytest.approx(clock.now + 0.6)
    clock.advance(0.59)
    recorder.fire_due()
    assert recorder.take_batch() is None
    clock.advance(0.02)
    recorder.fire_due()
    # One trailing write, latest wins: intermediate details are skipped.
    assert [op.detail for _, op in written(recorder.take_batch())] == [{"pct": 3}]
    assert recorder.next_due() is None


def test_detail_is_a_snapshot_not_a_merge(
    recorder: StepRecorder, job: Driver, clock: FakeClock
) -> None:
    job.start("RENDER", 1)
    job.progress("RENDER", pct=1, phase="a")
    clock.advance(2)
    job.progress("RENDER", pct=2)
    job.end("RENDER", 3)
    (row,) = step_rows(recorder)
    assert row.detail == {"pct": 2}


@pytest.mark.parametrize(
    "finish",
    [
        pytest.param(lambda job: job.end("RENDER", 9), id="step-end"),
        pytest.param(lambda job: job.start("SAVE", 9), id="next-step-start"),
        pytest.param(lambda job: job.end_job(9), id="close-all"),
    ],
)
def test_closing_cancels_the_trailing_write_and_carries_its_detail(
    recorder: StepRecorder, job: Driver, clock: FakeClock, finish: object
) -> None:
    job.start("RENDER", 1)
    job.progress("RENDER", pct=1)
    recorder.take_batch()
    clock.advance(0.1)
    job.progress("RENDER", pct=2)  # pending trailing write
    finish(job)  # type: ignore[operator]
    ops = written(recorder.take_batch())
    close = next(op for _, op in ops if isinstance(op, CloseStep))
    assert close.detail == {"pct": 2}
    assert not any(isinstance(op, Progress) for _, op in ops)
    clock.advance(5)
    recorder.fire_due()
    assert not any(isinstance(op, Progress) for _, op in written(recorder.take_batch()))
    assert recorder.next_due() is None


def test_explicit_end_detail_wins_over_pending_progress(
    recorder: StepRecorder, job: Driver, clock: FakeClock
) -> None:
    job.start("RENDER", 1)
    job.progress("RENDER", pct=1)
    clock.advance(0.1)
    job.progress("RENDER", pct=2)
    job.end("RENDER", 3, explicit='{"frames": 120}')
    (row,) = step_rows(recorder)
    assert row.detail == {"frames": 120}


def test_explicit_detail_that_is_not_a_json_object_is_wrapped(
    recorder: StepRecorder, job: Driver
) -> None:
    job.start("RENDER", 1)
    job.end("RENDER", 3, explicit="not json")
    (row,) = step_rows(recorder)
    assert row.detail == {"value": "not json"}


def test_flush_timers_writes_pending_progress_now(
    recorder: StepRecorder, job: Driver, clock: FakeClock
) -> None:
    job.start("RENDER", 1)
    job.progress("RENDER", pct=1)
    recorder.take_batch()
    clock.advance(0.1)
    job.progress("RENDER", pct=2)
    recorder.flush_timers()
    assert [op.detail for _, op in written(recorder.take_batch())] == [{"pct": 2}]


def test_progress_for_a_closed_step_is_ignored(recorder: StepRecorder, job: Driver) -> None:
    job.start("RENDER", 1)
    job.start("SAVE", 2)
    recorder.take_batch()
    job.progress("RENDER", pct=99)  # RENDER's span still emits after SAVE started
    job.end("RENDER", 3)
    assert recorder.take_batch() is None


@pytest.mark.parametrize(
    ("end", "status", "reason"),
    [
        pytest.param({}, "COMPLETED", None, id="success"),
        pytest.param({"failed": True, "error": "ValueError: x"}, "FAILED", "error", id="exception"),
        pytest.param(
            {"outcome": "target_deleted"}, "FAILED", "target_deleted", id="target-deleted"
        ),
        pytest.param(
            {"failed": True, "error": "CancelledError"}, "FAILED", "cancelled", id="cancelled"
        ),
        pytest.param({"outcome": "retry"}, "FAILED", "retry", id="adapter-outcome"),
        pytest.param({"outcome": "completed"}, "COMPLETED", None, id="completed-outcome"),
    ],
)
def test_job_end_closes_the_open_step_before_the_log(
    recorder: StepRecorder, job: Driver, end: dict[str, object], status: str, reason: str | None
) -> None:
    job.start("RENDER", 1)
    recorder.take_batch()  # the open row is already in the database
    job.end_job(9, **end)  # type: ignore[arg-type]
    ops = [op for _, op in written(recorder.take_batch())]
    assert [type(op) for op in ops] == [CloseStep, JobLogRow]
    close, log = ops
    assert (close.status, close.message, close.ended_us) == (status, reason, 9000)
    assert (log.status, log.reason) == (status, reason)
    assert log.created_us >= close.ended_us


def test_late_completion_after_the_time_limit_fails_step_and_attempt(
    recorder: StepRecorder,
) -> None:
    job = Driver(recorder, scope(deadline_ns=5_000_000))
    job.start_job()
    job.start("RENDER", 1)
    job.end("RENDER", 8)  # returned normally, but after the 5 ms limit
    job.end_job(9)
    ops = [op for _, op in written(recorder.take_batch())]
    row = next(op for op in ops if isinstance(op, EventRow))
    log = next(op for op in ops if isinstance(op, JobLogRow))
    assert (row.step_status, row.message) == ("FAILED", "time_limit")
    assert (log.status, log.reason) == ("FAILED", "time_limit")


def test_a_failed_step_inside_a_job_that_recovers(recorder: StepRecorder, job: Driver) -> None:
    job.start("UPLOAD", 1)
    job.end("UPLOAD", 2, failed=True, error="TimeoutError")
    job.start("UPLOAD", 3)
    job.end("UPLOAD", 4)
    job.end_job(5)
    ops = [op for _, op in written(recorder.take_batch())]
    statuses = [op.step_status for op in ops if isinstance(op, EventRow)]
    assert statuses == ["FAILED", "COMPLETED"]
    assert [op.status for op in ops if isinstance(op, JobLogRow)] == ["COMPLETED"]


def test_attempt_two_abandons_open_steps_of_earlier_attempts(recorder: StepRecorder) -> None:
    first = Driver(recorder, scope(1, span_id=1))
    first.start_job()
    first.start("RENDER", 1)
    recorder.take_batch()
    second = Driver(recorder, scope(2, span_id=2))
    second.start_job(10)
    ops = written(recorder.take_batch())
    assert [name for name, _ in ops] == ["abandon_earlier_attempts"]
    assert (ops[0][1].attempt, ops[0][1].at_us) == (2, 10_000)


def test_a_retry_in_the_same_batch_keeps_the_first_attempts_own_outcome(
    recorder: StepRecorder,
) -> None:
    first = Driver(recorder, scope(1, span_id=1))
    first.start_job()
    first.start("SAVE", 1)
    first.end_job(2, failed=True, error="OSError")
    second = Driver(recorder, scope(2, span_id=2))
    second.start_job(3)
    second.start("SAVE", 4)
    batch = recorder.take_batch()
    assert batch is not None
    # The abandon of attempt 1 must not run before attempt 1's own log: a new segment.
    assert len(batch.segments) == 2
    names = [name for name, _ in written(batch)]
    assert names.index("insert_job_logs") < names.index("abandon_earlier_attempts")


def test_another_execution_of_the_same_attempt_closes_the_foreign_step(
    recorder: StepRecorder,
) -> None:
    zombie = Driver(recorder, scope(1, span_id=1))
    zombie.start_job()
    zombie.start("RENDER", 1)
    rerun = Driver(recorder, scope(1, span_id=2))
    rerun.start_job(5)
    rerun.start("RENDER", 6)
    batch = recorder.take_batch()
    assert batch is not None
    ops = written(batch)
    foreign = [op for name, op in ops if isinstance(op, CloseForeign)]
    assert len(foreign) == 2
    assert foreign[0].execution_id != foreign[1].execution_id
    # The re-run's close of the zombie's row runs after the zombie's insert.
    names = [name for name, _ in ops]
    assert names == ["close_foreign_steps", "insert_events", "close_foreign_steps", "insert_events"]
    # Settled: the zombie's step abandoned when the re-run's began, the re-run's step open.
    zombie_row, rerun_row = settle(ops)
    assert (zombie_row.step_status, zombie_row.message) == ("FAILED", "abandoned")
    assert (zombie_row.created_us, zombie_row.ended_us) == (1000, 6000)
    assert (rerun_row.step_status, rerun_row.message) == ("RUNNING", None)
    assert (rerun_row.created_us, rerun_row.ended_us) == (6000, None)
    assert zombie_row.execution_id != rerun_row.execution_id


def test_step_keys_are_cleaned_and_bounded(recorder: StepRecorder, job: Driver) -> None:
    job.start("A\x00" + "x" * 1000, 1)
    (row,) = step_rows(recorder)
    assert row.step_key is not None
    assert "\x00" not in row.step_key
    assert len(row.step_key) == 256


# -- impossible times: one rule on every path ---------------------------------------------------


@pytest.mark.parametrize("cut_before_end", [False, True], ids=["insert-path", "update-path"])
def test_a_step_never_ends_before_it_starts(
    recorder: StepRecorder, job: Driver, cut_before_end: bool
) -> None:
    job.start("RENDER", 50)
    ops = written(recorder.take_batch()) if cut_before_end else []
    job.end("RENDER", 10, failed=True, error="E")
    ops += written(recorder.take_batch())
    (row,) = settle(ops)
    assert (row.step_status, row.created_us, row.ended_us) == ("FAILED", 50_000, 50_000)


def test_a_job_log_is_never_dated_before_its_attempt_or_its_steps(
    recorder: StepRecorder, clock: FakeClock
) -> None:
    job = Driver(recorder, scope())
    job.start_job(100)
    job.start("RENDER", 120)
    job.end("RENDER", 110)  # ends "before" it started: clamped to 120
    job.end_job(90)  # the attempt "ends" before it started and before its step
    logs = [op for _, op in written(recorder.take_batch()) if isinstance(op, JobLogRow)]
    assert [log.created_us for log in logs] == [120_000]
    late = Driver(recorder, scope(span_id=0xB2))
    late.start_job(300)
    late.end_job(200)
    logs = [op for _, op in written(recorder.take_batch()) if isinstance(op, JobLogRow)]
    assert [log.created_us for log in logs] == [300_000]


# -- the heartbeat list ---------------------------------------------------------------------------


def test_attempts_between_steps_are_kept_alive_too(recorder: StepRecorder, job: Driver) -> None:
    assert recorder.open_steps() == []  # nothing written yet that sweep could settle
    job.start("RENDER", 1)
    job.end("RENDER", 2)
    (alive,) = recorder.open_steps()
    assert alive[:3] == ("render", "42", 1)
    job.end_job(3)
    assert recorder.open_steps() == []


def test_a_resumed_attempt_is_kept_alive_before_its_next_step(recorder: StepRecorder) -> None:
    """Issue 22: a new writer process told only the job span does not know the attempt's last
    step row; it is heartbeated anyway (the statement finds that row), until the job ends."""
    attempt = scope(1)
    recorder.resume(JobStarted(attempt, 0))
    (alive,) = recorder.open_steps()
    assert alive[:3] == ("render", "42", 1)
    recorder.handle(JobEnded(attempt, 5 * MS, False, None, None))
    assert recorder.open_steps() == []


# -- the bound on attempts held in memory ---------------------------------------------------------


def test_attempts_beyond_the_bound_are_evicted_oldest_first(clock: FakeClock) -> None:
    evicted: list[int] = []
    recorder = StepRecorder(
        debounce_ms=1000,
        clock=clock,
        max_open_attempts=3,
        on_evict=lambda s: evicted.append(s.span_id),
    )
    for span_id in range(1, 101):
        driver = Driver(recorder, scope(span_id=span_id))
        driver.start_job(span_id)
        driver.start("RENDER", span_id)
        driver.progress("RENDER", n=1)
    assert recorder.open_attempts() == 3
    assert evicted == list(range(1, 98))
    recorder.take_batch()
    assert recorder.next_due() is None  # no timer keeps an evicted step alive


def test_a_forgotten_attempt_still_closes_its_open_step(clock: FakeClock) -> None:
    recorder = StepRecorder(debounce_ms=1000, clock=clock, max_open_attempts=1)
    first = Driver(recorder, scope(span_id=1))
    first.start_job(0)
    first.start("RENDER", 1)  # inserted in this batch
    other = Driver(recorder, scope(span_id=2)._replace(job_id="43"))
    other.start_job(2)  # another job: evicts the first attempt
    first.progress("RENDER", n=1)  # unknown now: ignored
    first.end("RENDER", 3)  # ignored: its close comes with the next step or the job's end
    first.start("UPLOAD", 4)
    first.end_job(5, failed=True, error="E")
    ops = written(recorder.take_batch())
    rows = settle(ops)
    assert [(r.attempt, r.step_key, r.step_status, r.ended_us) for r in rows] == [
        (1, "RENDER", "COMPLETED", 4000),
        (1, "UPLOAD", "FAILED", 5000),
    ]
    logs = [op for _, op in ops if isinstance(op, JobLogRow)]
    assert [(log.attempt, log.status, log.reason) for log in logs] == [(1, "FAILED", "error")]


def test_max_open_attempts_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="max_open_attempts"):
        StepRecorder(max_open_attempts=0)


def test_a_resumed_start_is_written_again_as_guarded_and_settles_nothing(
    recorder: StepRecorder,
) -> None:
    """Issue 22: a new writer process is told the open spans again; the step's row is inserted
    (a no-op where it is open) and its later progress and close are guarded updates, never
    folded into that insert (an insert of a closed row would not meet the open-step index),
    and attempt 2's start does not settle attempt 1 a second time."""
    attempt = scope(2)
    recorder.resume(JobStarted(attempt, 0))
    recorder.resume(StepStarted(attempt, "RENDER", 0x101, 1 * MS))
    recorder.handle(ProgressReported(attempt, "RENDER", {"pct": 60}))
    recorder.handle(StepEnded(attempt, "RENDER", 5 * MS, False, None, None))
    ops = written(recorder.take_batch())
    assert [name for name, _ in ops] == [
        "close_foreign_steps",
        "insert_events",
        "write_progress",
        "close_steps",
    ]
    inserted = ops[1][1]
    assert isinstance(inserted, EventRow)
    assert (inserted.step_status, inserted.ended_us, inserted.detail) == ("RUNNING", None, None)
    close = ops[3][1]
    assert isinstance(close, CloseStep)
    assert (close.step_key, close.status, close.ended_us) == ("RENDER", "COMPLETED", 5000)
