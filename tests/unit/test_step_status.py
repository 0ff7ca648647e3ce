"""Issue 37's step rules: SKIPPED steps, and steps that overlap (a step closed by a sibling's
start whose own end fails is FAILED), on the recorder's rows as the SQL would keep them."""

from __future__ import annotations

from otel_jobsteps._core.batch import EventRow, FailClosedStep, JobLogRow
from otel_jobsteps._core.commands import StepEnded, StepSkipped, StepStarted
from otel_jobsteps._core.dialects.cicd import STEP_SKIPPED
from otel_jobsteps._core.facts import LogFacts, SpanEvent, SpanFacts
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.translate import SpanTranslator
from otel_jobsteps._core.vocabulary import STEP
from otel_jobsteps.testing import apply
from tests.unit.recorder_support import MS, Driver, scope, settle, written


def _steps(events: list[EventRow]) -> list[tuple[str | None, str | None, str | None, bool]]:
    """(key, status, message, ended) of each step row, in order."""
    return [
        (r.step_key, r.step_status, r.message, r.ended_us is not None)
        for r in events
        if r.type == STEP
    ]


def _driver() -> Driver:
    driver = Driver(StepRecorder(debounce_ms=0), scope())
    driver.start_job(0)
    return driver


def test_a_skipped_step_is_written_ended_and_leaves_the_open_step_open() -> None:
    driver = _driver()
    recorder = driver.recorder
    driver.start("BUILD", 10)
    recorder.handle(StepSkipped(driver.scope, "LINT", 0x500, 20 * MS, 21 * MS, '{"why": "no"}'))
    driver.progress("BUILD", pct=50)
    driver.end("BUILD", 30)
    driver.end_job(40)
    logs: list[JobLogRow] = []
    events = settle(written(recorder.take_batch()), logs=logs)
    assert _steps(events) == [("BUILD", "COMPLETED", None, True), ("LINT", "SKIPPED", None, True)]
    build, lint = (r for r in events if r.type == STEP)
    assert build.detail == {"pct": 50}  # progress reached the step still open
    assert (lint.created_us, lint.ended_us, lint.detail) == (20_000, 21_000, {"why": "no"})
    assert lint.span_id == format(0x500, "016x")
    assert [log.status for log in logs] == ["COMPLETED"]


def test_a_skipped_step_is_never_the_failing_step() -> None:
    driver = _driver()
    driver.start("TEST", 10)
    driver.end("TEST", 20, failed=True, error="AssertionError")
    driver.recorder.handle(StepSkipped(driver.scope, "DEPLOY", 0x501, 25 * MS, 25 * MS, None))
    driver.end_job(30, failed=True)
    logs: list[JobLogRow] = []
    settle(written(driver.recorder.take_batch()), logs=logs)
    assert [(log.status, log.detail) for log in logs] == [("FAILED", {"step": "TEST"})]


def test_a_step_that_says_it_was_skipped_only_as_it_ends_closes_skipped() -> None:
    driver = _driver()
    driver.start("LINT", 10)  # span 0x101
    driver.recorder.handle(StepSkipped(driver.scope, "LINT", 0x101, 10 * MS, 12 * MS, None))
    driver.end_job(20)
    events = settle(written(driver.recorder.take_batch()))
    assert _steps(events) == [("LINT", "SKIPPED", None, True)]


def _overlapping(
    recorder: StepRecorder, *, batches: bool, logs: list[JobLogRow] | None = None
) -> list[EventRow]:
    """A starts, B starts (closing A), B ends, then A ends in error, then the job fails; each
    command in its own batch if ``batches`` (the sibling's close written before A's end)."""
    events: list[EventRow] = []
    logs = [] if logs is None else logs
    driver = Driver(recorder, scope())
    driver.start_job(0)
    for act in (
        lambda: driver.start("A", 10),
        lambda: driver.start("B", 20),
        lambda: driver.end("B", 30),
        lambda: recorder.handle(StepEnded(driver.scope, "A", 40 * MS, True, None, "boom", 0x101)),
        lambda: driver.end_job(50, failed=True),
    ):
        act()
        if batches:
            apply(written(recorder.take_batch()), events, logs)
    apply(written(recorder.take_batch()), events, logs)
    return events


def test_a_step_closed_by_a_siblings_start_that_then_fails_is_failed_with_its_error() -> None:
    for batches in (False, True):
        events = _overlapping(StepRecorder(debounce_ms=0), batches=batches)
        assert _steps(events) == [("A", "FAILED", "boom", True), ("B", "COMPLETED", None, True)]
        a = next(r for r in events if r.step_key == "A")
        assert a.ended_us == 40_000  # its own end, not the sibling's start


def test_the_attempt_that_fails_after_an_overlapping_failure_names_that_step() -> None:
    logs: list[JobLogRow] = []
    _overlapping(StepRecorder(debounce_ms=0), batches=False, logs=logs)
    assert [log.detail for log in logs] == [{"step": "A"}]


def test_a_successful_end_of_a_step_a_sibling_closed_changes_nothing() -> None:
    recorder = StepRecorder(debounce_ms=0)
    driver = Driver(recorder, scope())
    driver.start_job(0)
    driver.start("A", 10)
    driver.start("B", 20)
    recorder.handle(StepEnded(driver.scope, "A", 40 * MS, False, None, None, 0x101))
    driver.end("B", 45)
    batch = recorder.take_batch()
    assert all(name != "fail_sibling_closed_steps" for name, _ in written(batch))
    assert _steps(settle(written(batch))) == [
        ("A", "COMPLETED", None, True),
        ("B", "COMPLETED", None, True),
    ]


def test_the_guard_leaves_a_row_closed_by_its_own_end_or_abandoned() -> None:
    """The update's guard: COMPLETED, and ended as a sibling of its execution started."""
    at = 1_000_000

    def row(key: str, span: str, status: str, start: int, end: int | None) -> EventRow:
        return EventRow(
            "d", "j", "t", 1, STEP, key, status, None, None, None, span, "x", at + start,
            None if end is None else at + end,
        )  # fmt: skip

    events = [
        row("A", "a", "COMPLETED", 0, 10),  # closed by its own end: no step started at 10
        row("B", "b", "COMPLETED", 12, 20),  # closed as C started
        row("C", "c", "FAILED", 20, 30),  # abandoned at 30 as D started
        row("D", "d", "RUNNING", 30, None),
    ]
    failures = [FailClosedStep("d", "j", 1, "x", span, "late", at + 40) for span in "abc"]
    failures.append(FailClosedStep("d", "j", 1, "other", "b", "zombie", at + 40))
    apply([("fail_sibling_closed_steps", op) for op in failures], events)
    assert [(r.step_key, r.step_status, r.message) for r in events] == [
        ("A", "COMPLETED", None),
        ("B", "FAILED", "late"),
        ("C", "FAILED", None),
        ("D", "RUNNING", None),
    ]


def _span(span_id: int, parent: int, start: int, end: int, **attributes: object) -> SpanFacts:
    return SpanFacts(0xBEEF, span_id, parent, f"s{span_id}", start * MS, end * MS, attributes)


def _exception_log(span_id: int, event_name: str, kind: str, message: str) -> LogFacts:
    attributes = {"exception.type": kind, "exception.message": message}
    return LogFacts(0xBEEF, span_id, 15 * MS, event_name, 17, "ERROR", "failed", attributes)


def test_an_exception_log_record_is_the_failure_text_of_a_step_without_its_own() -> None:
    translator = SpanTranslator(problem=lambda kind, message: None)
    job = _span(1, 0, 0, 100, **{"job.domain": "d", "job.id": "j", "job.attempt": 1})
    translator.started(job)
    steps = {
        2: ("exception", {}),  # the record's text
        3: ("http.client.exception", {}),  # <domain>.exception too
        4: ("exception", {"job.error": "named"}),  # job.error wins
        5: ("progress.exceptional", {}),  # not an exception event: the status message
    }
    ended = {}
    for span_id, (event_name, more) in steps.items():
        step = _span(span_id, 1, 10, 20, **{"job.step.key": f"S{span_id}"}, **more)
        translator.started(step)
        log = translator.log(_exception_log(span_id, event_name, "TimeoutError", f"t{span_id}"))
        assert [type(c).__name__ for c in log] == ["LogRecorded"]  # still a log line
        failed = SpanFacts(**{**{n: getattr(step, n) for n in SpanFacts.__slots__},
                              "error": True, "status_message": "status"})  # fmt: skip
        (command,) = translator.ended(failed)
        ended[span_id] = command.error
    assert ended == {2: "TimeoutError: t2", 3: "TimeoutError: t3", 4: "named", 5: "status"}
    # A span's own exception event wins over a record.
    step = _span(6, 1, 30, 40, **{"job.step.key": "S6"})
    translator.started(step)
    translator.log(_exception_log(6, "exception", "TimeoutError", "late"))
    event = SpanEvent("exception", 35 * MS, {"exception.type": "OSError"})
    own = SpanFacts(**{**{n: getattr(step, n) for n in SpanFacts.__slots__},
                       "error": True, "events": [event]})  # fmt: skip
    assert [c.error for c in translator.ended(own)] == ["OSError"]
    # Not failed: no text at all.
    step = _span(7, 1, 50, 60, **{"job.step.key": "S7"})
    translator.started(step)
    translator.log(_exception_log(7, "exception", "TimeoutError", "retried"))
    assert [c.error for c in translator.ended(step)] == [None]


def test_the_translation_opens_no_step_for_a_skipped_span() -> None:
    translator = SpanTranslator(problem=lambda kind, message: None)
    job = _span(1, 0, 0, 100, **{"job.domain": "d", "job.id": "j", "job.attempt": 1})
    skipped = _span(2, 1, 10, 11, **{"job.step.key": "LINT", STEP_SKIPPED: True})
    ran = _span(3, 1, 20, 30, **{"job.step.key": "TEST"})
    translator.started(job)
    assert translator.started(skipped) == []
    (command,) = translator.ended(skipped)
    assert type(command) is StepSkipped
    assert (command.key, command.span_id, command.start_ns, command.end_ns) == (
        "LINT", 2, 10 * MS, 11 * MS,
    )  # fmt: skip
    doc = _span(4, 1, 12, 13, **{"job.step.key": "DOC", STEP_SKIPPED: True})
    told_whole = translator.whole(doc)
    assert [(type(c), c.key) for c in told_whole] == [(StepSkipped, "DOC")]
    assert [type(c) for c in translator.started(ran)] == [StepStarted]
    (ended,) = translator.ended(ran)
    assert type(ended) is StepEnded
    assert ended.span_id == 3
