"""Span hooks -> commands -> batches, through a real SDK and a fake store that keeps batches."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Status, StatusCode

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_OUTCOME,
    JOB_STEP_KEY,
    JOB_TYPE,
    ConfigurationError,
    JobStepsProcessor,
    job_attempt,
    progress,
    record_event,
    step,
)
from otel_jobsteps._core.batch import Batch, CloseForeign, CloseStep, EventRow, JobLogRow
from otel_jobsteps._live.watch import LogEmitted, SpanEnded, SpanStarted
from otel_jobsteps.testing import InMemoryStore
from tests.helpers import wait_until
from tests.unit.recorder_support import written
from tests.unit.writer_support import HeldSide

UNUSED_DSN = "postgresql://nobody:secret@127.0.0.1:1/never"


class Recording:
    """Stands in for the database: the public in-memory store, and the batches it was given."""

    def __init__(self) -> None:
        self.store = InMemoryStore()

    @property
    def batches(self) -> list[Batch]:
        return self.store.batches

    def ops(self) -> list[tuple[str, Any]]:
        return [pair for batch in self.batches for pair in written(batch)]

    def rows(self) -> list[EventRow]:
        """The final rows, however the writer happened to batch the operations."""
        return self.store.events()


@pytest.fixture
def setup() -> Iterator[tuple[trace.Tracer, JobStepsProcessor, Recording]]:
    recording = Recording()
    processor = JobStepsProcessor(store=recording.store)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    yield provider.get_tracer("test"), processor, recording
    provider.shutdown()


def job_attributes(attempt: int = 1) -> dict[str, Any]:
    return {JOB_DOMAIN: "render", JOB_ID: "42", JOB_TYPE: "thumbnail", JOB_ATTEMPT: attempt}


def test_spans_outside_a_job_cost_no_thread_and_no_connection(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    before = set(threading.enumerate())
    with (
        tracer.start_as_current_span("request"),
        tracer.start_as_current_span("not-a-step", attributes={JOB_STEP_KEY: "RENDER"}) as span,
    ):
        span.add_event("progress", {"pct": 1})
    assert set(threading.enumerate()) - before == set()  # no writer thread started
    assert processor.force_flush(1000)
    assert recording.batches == []


def test_plain_tracer_and_helpers_write_the_same_rows(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    with (
        tracer.start_as_current_span("job", attributes=job_attributes()),
        tracer.start_as_current_span("r", attributes={JOB_STEP_KEY: "RENDER"}) as span,
    ):
        span.add_event("progress", {"pct": 40})
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        progress(pct=40)
    assert processor.force_flush(5000)
    rows = recording.rows()
    assert [(r.step_key, r.step_status, r.detail) for r in rows] == [
        ("RENDER", "COMPLETED", {"pct": 40}),
        ("RENDER", "COMPLETED", {"pct": 40}),
    ]


def test_progress_reaches_the_writer_while_the_step_runs(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        assert processor.force_flush(5000)  # the open row is written
        trace.get_current_span().add_event("progress", {"pct": 7})
        assert processor.force_flush(5000)
        assert [op.detail for name, op in recording.ops() if name == "write_progress"] == [
            {"pct": 7}
        ]


def _fail(exc: BaseException) -> None:
    raise exc


def _target_deleted(span: trace.Span) -> None:
    span.set_attribute(JOB_OUTCOME, "target_deleted")


OUTCOMES = [
    pytest.param(None, None, "COMPLETED", None, id="success"),
    pytest.param(ValueError("boom"), None, "FAILED", "error", id="exception"),
    pytest.param(None, _target_deleted, "FAILED", "target_deleted", id="target-deleted"),
]


@pytest.mark.parametrize(("exc", "mark", "status", "reason"), OUTCOMES)
def test_job_end_closes_the_step_before_the_log(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
    exc: BaseException | None,
    mark: Any,
    status: str,
    reason: str | None,
) -> None:
    tracer, processor, recording = setup
    with (
        pytest.raises(ValueError, match="boom") if exc else nullcontext(),
        tracer.start_as_current_span("job", attributes=job_attributes()) as job,
    ):
        span = tracer.start_span("save", attributes={JOB_STEP_KEY: "SAVE"})
        assert processor.force_flush(5000)  # the step row is open in the database
        if mark:
            mark(job)
        if exc:
            _fail(exc)
    span.end()
    assert processor.force_flush(5000)
    ops = [op for _, op in recording.ops() if isinstance(op, (CloseStep, JobLogRow))]
    assert [type(op) for op in ops] == [CloseStep, JobLogRow]
    assert (ops[0].status, ops[1].status, ops[1].reason) == (status, status, reason)


def test_time_limit_late_completion(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    attributes = {**job_attributes(), "job.time_limit": 0.001}
    job = tracer.start_span("job", attributes=attributes, start_time=1_000_000_000)
    with trace.use_span(job, end_on_exit=False):
        tracer.start_span("s", attributes={JOB_STEP_KEY: "RENDER"}, start_time=1_000_000_000).end(
            end_time=1_500_000_000
        )
    job.end(end_time=1_600_000_000)
    assert processor.force_flush(5000)
    ops = recording.ops()
    row = recording.rows()[0]
    log = next(op for _, op in ops if isinstance(op, JobLogRow))
    assert (row.step_status, row.message, log.status, log.reason) == (
        "FAILED",
        "time_limit",
        "FAILED",
        "time_limit",
    )


def test_asyncio_cancellation_fails_the_attempt_as_cancelled(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    started = asyncio.Event()

    async def job() -> None:
        async with (
            job_attempt("render", "42", "thumbnail", tracer=tracer),
            step("RENDER", tracer=tracer),
        ):
            started.set()
            await asyncio.sleep(3600)

    async def main() -> None:
        task = asyncio.create_task(job())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert processor.force_flush(5000)
    ops = recording.ops()
    row = recording.rows()[0]
    log = next(op for _, op in ops if isinstance(op, JobLogRow))
    assert (row.step_status, log.status, log.reason) == ("FAILED", "FAILED", "cancelled")


def test_scope_reaches_threads_that_copy_the_context(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    import contextvars

    tracer, processor, recording = setup
    with job_attempt("render", "42", "thumbnail", tracer=tracer):
        context = contextvars.copy_context()

        def work() -> None:
            with step("RENDER", tracer=tracer):
                progress(pct=1)

        thread = threading.Thread(target=context.run, args=(work,))
        thread.start()
        thread.join()
    assert processor.force_flush(5000)
    rows = recording.rows()
    assert [(r.step_key, r.detail) for r in rows] == [("RENDER", {"pct": 1})]


def test_a_rerun_of_the_same_attempt_abandons_the_other_executions_step(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    first = tracer.start_span("job", attributes=job_attributes())
    with trace.use_span(first, end_on_exit=False):
        tracer.start_span("r", attributes={JOB_STEP_KEY: "RENDER"})  # the zombie never ends it
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        pass
    assert processor.force_flush(5000)
    foreign = [op for _, op in recording.ops() if isinstance(op, CloseForeign)]
    executions = {op.execution_id for op in foreign}
    assert len(executions) == 2  # the re-run closes whatever another execution left open


def test_ordinary_events_are_rows_not_steps(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        record_event("LOG", "halfway", tracer=tracer, frame=12)
    assert processor.force_flush(5000)
    rows = recording.rows()
    assert [(r.type, r.step_key, r.message, r.detail) for r in rows] == [
        ("STEP", "RENDER", None, None),
        ("LOG", None, "halfway", {"frame": 12}),
    ]


@pytest.mark.parametrize(
    "attempt",
    [pytest.param(0, id="zero"), pytest.param(-1, id="negative"), pytest.param("x", id="text")],
)
def test_invalid_job_spans_are_ignored_and_counted(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording], attempt: object
) -> None:
    tracer, processor, recording = setup
    attributes = {**job_attributes(), JOB_ATTEMPT: attempt}
    with (
        tracer.start_as_current_span("job", attributes=attributes),
        tracer.start_as_current_span("s", attributes={JOB_STEP_KEY: "RENDER"}),
    ):
        pass
    assert processor.force_flush(1000)
    assert recording.batches == []
    assert processor.stats()["invalid_job_span"] == 1


def test_error_status_without_exception_fails_the_step(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    with (
        job_attempt("render", "42", "thumbnail", tracer=tracer),
        step("RENDER", tracer=tracer) as span,
    ):
        span.set_status(Status(StatusCode.ERROR, "render refused"))
    assert processor.force_flush(5000)
    row = recording.rows()[0]
    assert (row.step_status, row.message) == ("FAILED", "render refused")


def test_configuration_errors_are_raised_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOBSTEPS_DSN", raising=False)
    with pytest.raises(ConfigurationError, match="OTEL_JOBSTEPS_DSN"):
        JobStepsProcessor()
    with pytest.raises(ConfigurationError) as error:
        JobStepsProcessor("postgresql://u:topsecret@host:notaport/db x=")
    assert "topsecret" not in str(error.value)
    with pytest.raises(ConfigurationError, match="debounce_ms"):
        JobStepsProcessor(UNUSED_DSN, debounce_ms=-1)
    with pytest.raises(ConfigurationError, match="max_queue_size"):
        JobStepsProcessor(UNUSED_DSN, max_queue_size=0)
    monkeypatch.setenv("OTEL_JOBSTEPS_DEBOUNCE_MS", "soon")
    with pytest.raises(ConfigurationError, match="OTEL_JOBSTEPS_DEBOUNCE_MS"):
        JobStepsProcessor(UNUSED_DSN)


def test_the_writer_is_a_thread_or_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"thread, process.*'fiber'"):
        JobStepsProcessor(UNUSED_DSN, writer="fiber")
    with pytest.raises(ConfigurationError, match="not store="):
        JobStepsProcessor(writer="process", store=InMemoryStore())
    monkeypatch.setenv("OTEL_JOBSTEPS_WRITER", "fiber")
    with pytest.raises(ConfigurationError, match="'fiber'"):
        JobStepsProcessor(UNUSED_DSN)
    # The environment's choice is for processors that write to PostgreSQL, not for tests'.
    monkeypatch.setenv("OTEL_JOBSTEPS_WRITER", "process")
    JobStepsProcessor(store=InMemoryStore()).shutdown()


def test_progress_with_nested_values_keeps_them_as_json_objects(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        progress(frame={"done": 10, "of": 300}, eta=None, pct=3)
    assert processor.force_flush(5000)
    assert recording.rows()[0].detail == {"frame": {"done": 10, "of": 300}, "eta": None, "pct": 3}


def test_the_writer_reads_progress_while_the_step_runs_without_a_flush(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    """No hook in the job's add_event (the SDK's own list stays as it is): the writer polls the
    running step and writes its first progress by itself."""
    tracer, processor, recording = setup
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        assert processor.force_flush(5000)  # the open row is written
        span: Any = trace.get_current_span()
        progress(pct=1)
        progress(pct=2)
        assert type(span._events) is BoundedList
        wait_until(
            lambda: any(name == "write_progress" for name, _ in recording.ops()),
            what="the polled progress write",
        )
        assert [op.detail for name, op in recording.ops() if name == "write_progress"] == [
            {"pct": 2}
        ]
    assert processor.force_flush(5000)
    assert recording.rows()[0].detail == {"pct": 2}


def test_queue_items_built_without_their_constructor_have_their_arity() -> None:
    """The hooks build SpanStarted / SpanEnded / LogEmitted without their constructor (speed):
    a new field would otherwise surface as an AttributeError or IndexError on the writer thread."""
    assert SpanStarted.__slots__ == ("attributes", "fields", "span")
    assert SpanEnded._fields == ("fields",)
    assert LogEmitted._fields == ("record",)


def test_job_spans_that_never_end_are_bounded_and_counted() -> None:
    processor = JobStepsProcessor(store=InMemoryStore(), max_open_spans=5)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    for n in range(8):
        tracer.start_span("job", attributes={**job_attributes(), JOB_ID: str(n)})  # never ended
    assert processor.force_flush(5000)
    stats = processor.stats()
    assert stats["evicted_spans"] == 3  # counted once, by the translation
    assert stats["open_spans"] == 5
    provider.shutdown()


def test_progress_too_deep_for_json_is_a_marker_not_an_exception_in_the_job(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    tracer, processor, recording = setup
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5000):
        inner["x"] = inner = {}
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        progress(deep=deep)
        record_event("LOG", "deep", deep=deep)
    assert processor.force_flush(5000)
    assert recording.rows()[0].detail == {"value": "<not JSON: RecursionError>"}


def test_steps_and_events_inside_a_job_use_its_tracer(
    setup: tuple[trace.Tracer, JobStepsProcessor, Recording],
) -> None:
    """job_attempt(tracer=...) with no global provider: step(), progress() and record_event()
    given no tracer record through the job's (the README's quickstart shape)."""
    tracer, processor, recording = setup
    with job_attempt("render", "42", "thumbnail", tracer=tracer), step("RENDER"):
        progress(pct=5)
        record_event("STALLED", "lost worker")
    assert processor.force_flush(5000)
    rows = recording.rows()
    assert [(r.type, r.step_key, r.detail) for r in rows] == [
        ("STEP", "RENDER", {"pct": 5}),
        ("STALLED", None, None),
    ]


def test_a_step_read_after_its_end_is_one_closed_row_and_nested_spans_keep_the_order() -> None:
    """The writer reads a start whose span has ended together with its end when that end is
    the next item (one closed insert); anything between them is applied in queue order."""
    side = HeldSide()  # the writer thread is not involved: items applied by hand
    processor = JobStepsProcessor(writer_side=side)
    queued = side.held
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("job", attributes=job_attributes()):
        with tracer.start_as_current_span("a", attributes={JOB_STEP_KEY: "A"}) as span:
            span.add_event("progress", {"pct": 50})
        with tracer.start_as_current_span("b", attributes={JOB_STEP_KEY: "B"}):
            with tracer.start_as_current_span("c", attributes={JOB_STEP_KEY: "C"}):
                pass
    ops = written(side.read_by_hand())
    steps = [
        (op.step_key, op.step_status, op.detail) for name, op in ops if name == "insert_events"
    ]
    closes = [(op.step_key, op.status) for name, op in ops if name == "close_steps"]
    # B is closed by C's start (one open step per attempt); B's own end then finds C open.
    assert steps == [
        ("A", "COMPLETED", {"pct": 50}),
        ("B", "COMPLETED", None),
        ("C", "COMPLETED", None),
    ]
    assert closes == []
    assert [type(item).__name__ for item in queued[1:3]] == ["SpanStarted", "SpanEnded"]
    provider.shutdown()


def test_a_parent_a_dialect_claims_once_its_attributes_are_set_is_queued_before_its_child() -> None:
    """DBOS sets a workflow span's attributes just after its start (none at its start): its
    first child's start queues it (its own span, so its own start time), then the child; a
    parent no dialect claims, another process's parent and one the child outlives are not."""
    side = HeldSide()
    processor = JobStepsProcessor(writer_side=side, dialects="dbos")
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request"):  # no dialect's: nothing queued
        with tracer.start_as_current_span("SELECT"):
            pass
    assert side.held == []
    with tracer.start_as_current_span("checkout") as workflow:
        assert side.held == []  # nothing named at its start
        workflow.set_attributes({"operationUUID": "wf-1", "operationType": "workflow"})
        with tracer.start_as_current_span("reserve_stock") as child:
            queued = [(type(item).__name__, item.span) for item in side.held]
            assert queued == [("SpanStarted", workflow), ("SpanStarted", child)]
    held = len(side.held)
    remote = trace.NonRecordingSpan(workflow.get_span_context())
    with tracer.start_as_current_span("elsewhere", context=trace.set_span_in_context(remote)):
        pass
    after = tracer.start_span("late", context=trace.set_span_in_context(workflow))
    after.end()
    assert len(side.held) == held  # remote, and ended: neither queued again
    provider.shutdown()


@pytest.mark.parametrize("dialects", ["none", "all"])
def test_a_span_kind_that_is_not_a_span_kind_is_read_as_unspecified(dialects: str) -> None:
    """The SDK takes any kind: ``start_span(name, context, {...})`` makes the attributes the
    kind. Such a span is read (kind unspecified), never an internal error."""
    store = InMemoryStore()
    processor = JobStepsProcessor(store=store, dialects=dialects)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("job", attributes=job_attributes()) as job:
        odd = tracer.start_span("odd", trace.set_span_in_context(job), {JOB_STEP_KEY: "X"})  # type: ignore[arg-type]
        odd.end()
        outside = tracer.start_span("outside", None, {"k": 1})  # type: ignore[arg-type]
        outside.end()
    assert processor.force_flush(5_000)
    provider.shutdown()
    assert "internal_error" not in processor.stats()
    assert [row.status for row in store.job_logs()] == ["COMPLETED"]  # the job was written
