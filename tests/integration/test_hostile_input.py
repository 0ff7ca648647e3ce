"""Hostile input never reaches the job and never poisons a batch: the rows around it land."""

from __future__ import annotations

import itertools
import json
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

from otel_jobsteps import (
    JOB_STEP_DETAIL,
    JobStepsProcessor,
    job_attempt,
    progress,
    record_event,
    step,
)
from tests.helpers import TracingFactory, rows

_examples = itertools.count()
# NUL and a lone surrogate: text and jsonb refuse both.
texts = (
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
    | st.just("a\x00b")
    | st.just("a\ud800b")
)
scalars = (
    texts
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.just(10**5000)  # past Python's int-to-text digit limit
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.none()
)
details = st.dictionaries(
    texts,
    scalars | st.lists(scalars, max_size=4) | st.dictionaries(texts, scalars, max_size=3),
    max_size=6,
)
attribute_values = texts | st.integers(-5, 5) | st.floats(allow_nan=True) | st.booleans()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    detail=details,
    step_key=texts,
    explicit=texts | st.just('{"a": NaN}') | st.just("[1, 2]"),
    job_id=attribute_values,
    attempt=attribute_values,
)
def test_hostile_values_are_absorbed_and_neighbours_written(
    dsn: str,
    detail: dict[str, Any],
    step_key: str,
    explicit: str,
    job_id: object,
    attempt: object,
) -> None:
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    marker = f"example-{next(_examples)}"
    try:
        # A hostile job span: ignored when its scope is invalid, recorded when it is not.
        attributes = {"job.domain": "hostile", "job.id": job_id, "job.attempt": attempt}
        with tracer.start_as_current_span("job", attributes=attributes):  # type: ignore[arg-type]
            with step(step_key or "EMPTY", tracer=tracer):
                progress(detail)
        with job_attempt("hostile", marker, "t", tracer=tracer):
            with step("BEFORE", tracer=tracer):
                progress(ok=1)
            with step(step_key or "EMPTY", tracer=tracer) as bad:
                progress(detail)
                bad.set_attribute(JOB_STEP_DETAIL, explicit)
            with step("AFTER", tracer=tracer):
                progress(ok=2)
        assert processor.force_flush(10_000)
        stats = processor.stats()
    finally:
        provider.shutdown()
    assert not any(k.startswith(("rejected_", "internal_error")) for k in stats), stats
    with psycopg.connect(dsn) as conn:
        got = rows(
            conn,
            "SELECT step_key, step_status, detail FROM job_event WHERE job_id = %s ORDER BY id",
            marker,
        )
    assert [(k, s) for k, s, _ in got][::2] == [("BEFORE", "COMPLETED"), ("AFTER", "COMPLETED")]
    assert got[1][1] == "COMPLETED"
    assert "\x00" not in json.dumps(got[1][2])


def test_a_huge_detail_becomes_a_truncation_marker(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing(max_detail_bytes=1024)
    with job_attempt("hostile", "big", "t", tracer=tracer), step("RENDER", tracer=tracer):
        progress(blob="x" * 3_000_000, small=1)
    assert processor.force_flush(10_000)
    ((detail,),) = rows(conn, "SELECT detail FROM job_event")
    assert detail["_truncated"] is True
    assert detail["original_bytes"] > 3_000_000
    assert detail["keys"] == ["blob", "small"]


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_text_columns_never_receive_what_postgresql_refuses(
    tracing: TracingFactory, conn: psycopg.Connection[Any], bad: str
) -> None:
    tracer, processor = tracing()
    with job_attempt(f"do{bad}main", f"j{bad}b", f"ty{bad}pe", tracer=tracer):
        with step(f"ST{bad}EP", tracer=tracer):
            progress({f"k{bad}": f"v{bad}"})
            raise_and_swallow(f"bad {bad} byte")
        with pytest.raises(ValueError, match="failed"), step("NEXT", tracer=tracer):
            raise ValueError(f"failed {bad}")
    assert processor.force_flush(10_000)
    assert not any(k.startswith("rejected_") for k in processor.stats()), processor.stats()
    scope = ("do\ufffdmain", "j\ufffdb", "ty\ufffdpe")
    assert rows(
        conn,
        "SELECT domain, job_id, job_type, step_key, step_status, detail,"
        " strpos(message, 'failed \ufffd') > 0 FROM job_event ORDER BY id",
    ) == [
        (*scope, "ST\ufffdEP", "COMPLETED", {"k\ufffd": "v\ufffd"}, None),
        (*scope, "NEXT", "FAILED", None, True),
    ]
    assert rows(conn, "SELECT status FROM job_log") == [("COMPLETED",)]


def raise_and_swallow(message: str) -> None:
    try:
        raise ValueError(message)
    except ValueError:
        pass


def test_numeric_string_attempt_is_accepted(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    attributes = {"job.domain": "d", "job.id": "7", "job.type": "t", "job.attempt": "2"}
    with tracer.start_as_current_span("job", attributes=attributes):
        with step("RENDER", tracer=tracer):
            pass
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT attempt FROM job_event") == [(2,)]


DEEP = "[" * 1_000 + "]" * 1_000


def test_a_deeply_nested_detail_never_loses_the_close_it_rides_with(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    with job_attempt("hostile", "deep", "t", tracer=tracer):
        record_event("LOG", "deep detail", tracer=tracer, nested=json.loads("[" * 900 + "]" * 900))
        with step("FETCH", tracer=tracer):
            progress(nested={"a": json.loads("[" * 900 + "]" * 900)})
        with step("RENDER", tracer=tracer) as render:
            render.set_attribute(JOB_STEP_DETAIL, DEEP)
            render.set_status(StatusCode.ERROR, "render broke")
        with step("UPLOAD", tracer=tracer):
            pass
    assert processor.force_flush(10_000)
    stats = processor.stats()
    assert not any(k.startswith(("rejected_", "internal_error", "write_failed")) for k in stats)
    got = rows(
        conn,
        "SELECT type, step_key, step_status, message, detail->>'value' IS NOT NULL"
        " FROM job_event ORDER BY id",
    )
    assert [g[:4] for g in got] == [
        ("LOG", None, None, "deep detail"),
        ("STEP", "FETCH", "COMPLETED", None),
        ("STEP", "RENDER", "FAILED", "render broke"),
        ("STEP", "UPLOAD", "COMPLETED", None),
    ]
    assert got[2][4], "the unreadable explicit detail is kept as its text"
    assert rows(conn, "SELECT status FROM job_log") == [("COMPLETED",)]


def test_ints_too_large_to_write_out_never_lose_a_row(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    """An attribute may be any int; past Python's digit limit ``str()`` itself fails."""
    huge = 10**5000
    tracer, processor = tracing()
    with tracer.start_as_current_span("job", attributes={"job.domain": "d", "job.id": huge}):
        pass  # an id too long: the span is ignored, counted as invalid
    with job_attempt("hostile", "huge", "t", tracer=tracer):
        with tracer.start_as_current_span("step", attributes={"job.step.key": huge}) as span:
            span.add_event("progress", {"n": 1})
        with tracer.start_as_current_span(
            "event", attributes={"job.event.type": huge, "job.event.message": huge}
        ):
            pass
        with tracer.start_as_current_span("fails", attributes={"job.step.key": "FAILS"}) as span:
            span.record_exception(ValueError("boom"), {"exception.type": huge})
            span.set_status(StatusCode.ERROR)
    assert processor.force_flush(10_000)
    stats = processor.stats()
    assert "internal_error" not in stats, stats
    assert stats.get("invalid_job_span") == 1, stats
    marker = "<int too large to show>"
    assert rows(conn, "SELECT type, step_key, step_status, message FROM job_event ORDER BY id") == [
        ("STEP", marker, "COMPLETED", None),
        (marker, None, None, marker),
        ("STEP", "FAILS", "FAILED", f"{marker}: boom"),
    ]
    assert rows(conn, "SELECT status FROM job_log") == [("COMPLETED",)]
