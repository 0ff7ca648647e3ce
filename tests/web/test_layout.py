"""Pure logic of the web page: trace links, paging cursors and swimlane geometry (no database)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from otel_jobsteps import ConfigurationError
from otel_jobsteps._cli.formatting import format_ago, format_duration
from otel_jobsteps.query import AttemptSummary, JobLogEntry
from otel_jobsteps.web.layout import (
    AXIS_WIDTH,
    COLLAPSE_OVER,
    ROWS_SHOWN,
    Bar,
    Cursor,
    Lane,
    Progress,
    TraceLinks,
    build_timeline,
    drawn_rows,
    progress_of,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
TEMPO = (
    "https://grafana.example/explore?panes=%7B%22q%22:%22{trace_id}%22,"
    '"range":{"from":"{start_ms}","to":"{end_ms}"}}'
)


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("javascript:alert(1)//{trace_id}", id="javascript"),
        pytest.param("ftp://host/{trace_id}", id="ftp"),
        pytest.param("//host/{trace_id}", id="no-scheme"),
        pytest.param("http:///{trace_id}", id="no-host"),
        pytest.param("https://jaeger/trace", id="no-trace-id"),
    ],
)
def test_trace_template_must_be_http_with_trace_id(template: str) -> None:
    with pytest.raises(ConfigurationError):
        TraceLinks(template)


def test_trace_link_fills_every_placeholder() -> None:
    links = TraceLinks(
        "http://jaeger:16686/trace/{trace_id}?uiFind={span_id}&s={start_ms}&e={end_ms}"
    )

    url = links.link(TRACE, SPAN, T0, T0 + timedelta(seconds=2))

    start_ms = int(T0.timestamp() * 1000)
    assert url == (
        f"http://jaeger:16686/trace/{TRACE}?uiFind={SPAN}&s={start_ms}&e={start_ms + 2001}"
    )


def test_trace_link_keeps_json_braces_of_a_grafana_template() -> None:
    url = TraceLinks(TEMPO).link(TRACE, None, T0, T0)

    assert url is not None
    assert f"%22{TRACE}%22" in url
    assert '"from":"' + str(int(T0.timestamp() * 1000)) + '"' in url


@pytest.mark.parametrize(
    ("trace_id", "span_id"),
    [
        pytest.param(None, SPAN, id="no-trace"),
        pytest.param("x" * 32, SPAN, id="not-hex"),
        pytest.param(TRACE.upper(), SPAN, id="upper-case"),
        pytest.param(TRACE + "00", SPAN, id="too-long"),
        pytest.param(TRACE, '"><script>', id="hostile-span"),
    ],
)
def test_ids_that_are_not_opentelemetry_hex_get_no_link(trace_id: str | None, span_id: str) -> None:
    assert TraceLinks("https://jaeger/{trace_id}/{span_id}").link(trace_id, span_id, T0, T0) is None


def test_cursor_round_trips_through_the_url() -> None:
    exact = Cursor(T0, "render", "a/b&c")
    inclusive = Cursor(T0)

    assert Cursor.parse(exact.query()) == exact
    assert Cursor.parse(inclusive.query()) == inclusive
    assert Cursor.parse({}) is None
    by_id = Cursor(None, "render", "job-7")  # an id search's: no time
    assert Cursor.parse(by_id.query()) == by_id
    assert Cursor.parse_trail([by_id.token(), exact.token()]) == [by_id, exact]
    assert Cursor.parse({"before_domain": "render"}) is None  # half a job is none
    with pytest.raises(ConfigurationError):
        Cursor.parse({"before": "yesterday"})
    with pytest.raises(ConfigurationError):
        Cursor.parse({"before": "2026-01-02T03:04:05"})  # no offset


def _summary(attempt: int, status: str, start: float, end: float | None) -> AttemptSummary:
    return AttemptSummary(
        attempt=attempt,
        job_type="thumbnail",
        status=status,
        reason="error" if status == "FAILED" else None,
        error=None,
        last_step=None,
        open_step=None,
        started_at=T0 + timedelta(seconds=start),
        processing_started_at=T0 + timedelta(seconds=start),
        ended_at=None if end is None else T0 + timedelta(seconds=end),
        last_activity_at=None,
        stalled_count=0,
    )


ROW_IDS = itertools.count(1)


def _step(attempt: int, key: str, start: float, end: float | None, status: str) -> dict[str, Any]:
    return {
        "id": next(ROW_IDS),
        "attempt": attempt,
        "type": "STEP",
        "step_key": key,
        "step_status": status,
        "detail": None,
        "message": None,
        "trace_id": TRACE,
        "span_id": SPAN,
        "created_at": T0 + timedelta(seconds=start),
        "ended_at": None if end is None else T0 + timedelta(seconds=end),
        "seen_at": T0 + timedelta(seconds=start),
    }


def _bars(lane: Lane) -> list[Bar]:
    return [row for row in lane.rows if isinstance(row, Bar)]


def test_attempts_share_one_axis_and_widths_follow_durations() -> None:
    attempts = (_summary(1, "FAILED", 0, 4), _summary(2, "COMPLETED", 5, 10))
    rows = [
        _step(1, "RENDER", 0, 3, "COMPLETED"),
        _step(1, "SAVE", 3, 4, "FAILED"),
        {**_step(1, "x", 2, None, "-"), "type": "STALLED", "message": "lost lock"},
        _step(2, "RENDER", 5, 9, "COMPLETED"),
        _step(2, "SAVE", 9, 10, "COMPLETED"),
    ]
    log = JobLogEntry(
        attempt=1,
        detail=None,
        created_at=T0 + timedelta(seconds=4),
        status="FAILED",
        reason="error",
        trace_id=TRACE,
    )

    timeline = build_timeline(attempts, rows, [log], T0 + timedelta(seconds=60), None)

    first, second = timeline.lanes
    assert (timeline.start, timeline.end) == (T0, T0 + timedelta(seconds=10))
    assert [(b.key, b.x, b.width) for b in _bars(first)] == [("RENDER", 0, 300), ("SAVE", 300, 100)]
    assert [(b.key, b.x, b.width) for b in _bars(second)] == [
        ("RENDER", 500, 400),
        ("SAVE", 900, 100),
    ]
    assert [(m.type, m.x) for m in first.marks] == [("STALLED", 200)]
    assert first.log == log
    assert second.log is None
    assert not timeline.running
    assert timeline.ticks[-1] == timeline.end
    assert timeline.tick_labels == ("0s", "2.50s", "5.00s", "7.50s", "10.00s")


def test_ticks_of_a_short_axis_stay_apart() -> None:
    attempts = (_summary(1, "COMPLETED", 0, 0.004),)
    rows = [_step(1, "FETCH", 0, 0.004, "COMPLETED")]

    timeline = build_timeline(attempts, rows, [], T0 + timedelta(seconds=1), None)

    assert timeline.tick_labels == ("0.00ms", "1.00ms", "2.00ms", "3.00ms", "4.00ms")


def test_a_running_step_reaches_the_time_of_the_read() -> None:
    attempts = (_summary(1, "RUNNING", 0, None),)
    rows = [_step(1, "FETCH", 0, 1, "COMPLETED"), _step(1, "RENDER", 1, None, "RUNNING")]

    early = build_timeline(attempts, rows, [], T0 + timedelta(seconds=2), None)
    later = build_timeline(attempts, rows, [], T0 + timedelta(seconds=10), None)

    assert early.running
    assert early.lanes[0].open_bar is not None
    assert early.lanes[0].open_bar.width == AXIS_WIDTH / 2
    assert later.lanes[0].open_bar is not None
    assert later.lanes[0].open_bar.width == AXIS_WIDTH * 0.9


def test_rows_of_an_attempt_are_its_steps_and_events_in_time_order() -> None:
    attempts = (_summary(1, "FAILED", 0, 4),)
    rows = [
        _step(1, "RENDER", 0, 3, "COMPLETED"),
        {**_step(1, "x", 2, None, "-"), "type": "STALLED", "message": "lost lock"},
        _step(1, "SAVE", 3, 4, "FAILED"),
    ]

    lane = build_timeline(attempts, rows, [], T0 + timedelta(seconds=9), None).lanes[0]

    assert [getattr(r, "key", None) or r.type for r in lane.rows] == [
        "RENDER",
        "STALLED",
        "SAVE",
    ]


def test_the_selected_step_is_the_last_run_of_its_key_in_the_chosen_attempt() -> None:
    attempts = (_summary(1, "FAILED", 0, 4), _summary(2, "COMPLETED", 5, 10))
    rows = [
        _step(1, "SAVE", 0, 1, "COMPLETED"),
        _step(1, "RENDER", 1, 2, "COMPLETED"),
        _step(1, "SAVE", 2, 4, "FAILED"),
        _step(2, "SAVE", 5, 10, "COMPLETED"),
    ]

    timeline = build_timeline(
        attempts, rows, [], T0 + timedelta(seconds=10), None, attempt=1, step="SAVE"
    )
    unselected = build_timeline(attempts, rows, [], T0 + timedelta(seconds=10), None)

    assert timeline.selected is timeline.lanes[0]
    assert timeline.step is not None
    assert (timeline.step.status, timeline.step.started_at) == ("FAILED", T0 + timedelta(seconds=2))
    assert unselected.selected is unselected.lanes[1]
    assert unselected.step is None


def test_a_long_attempt_draws_a_window_around_the_selection_and_earlier_ones_collapse() -> None:
    many = ROWS_SHOWN * 3
    attempts = (_summary(1, "FAILED", 0, many), _summary(2, "RUNNING", many, None))
    rows = [_step(1, f"S{i}", i, i + 1, "COMPLETED") for i in range(many)]
    rows += [_step(2, f"T{i}", many + i, many + i + 1, "COMPLETED") for i in range(many)]
    as_of = T0 + timedelta(seconds=2 * many)

    latest = build_timeline(attempts, rows, [], as_of, None)
    chosen = build_timeline(attempts, rows, [], as_of, None, attempt=1, step="S250")
    paged = build_timeline(attempts, rows, [], as_of, None, attempt=2, first=10)

    assert many > COLLAPSE_OVER
    first, second = latest.lanes
    assert (first.collapsed, first.rows, first.count) == (True, (), many)
    assert (second.first, len(second.rows), second.hidden_after) == (
        many - ROWS_SHOWN,
        ROWS_SHOWN,
        0,
    )
    window = chosen.lanes[0]
    assert not window.collapsed
    assert window.first == 250 - ROWS_SHOWN // 2
    assert chosen.step in window.rows
    assert (paged.lanes[1].first, paged.lanes[1].hidden_after) == (10, many - 10 - ROWS_SHOWN)
    # only what a page draws is read in full: the windows drawn and the selected step
    drawn = drawn_rows(chosen)
    assert len(drawn) == 2 * ROWS_SHOWN  # the selected attempt's window and the latest's
    assert chosen.step is not None
    assert chosen.step.id in drawn


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        pytest.param({"pct": 40}, Progress(40, 100, "40%"), id="pct"),
        pytest.param({"fps": 29.97, "pct": 6.5}, Progress(6.5, 100, "6.5%"), id="pct-float"),
        pytest.param({"progress": 3, "total": 10}, Progress(3, 10, "3 / 10"), id="pair"),
        pytest.param({"pct": 140}, None, id="pct-over-100"),
        pytest.param({"pct": True}, None, id="pct-bool"),
        pytest.param({"pct": "40"}, None, id="pct-text"),
        pytest.param({"pct": float("nan")}, None, id="pct-nan"),
        pytest.param({"pct": 10**400}, None, id="pct-past-a-float"),
        pytest.param({"progress": 1, "total": 10**400}, None, id="total-past-a-float"),
        pytest.param({"progress": 10**400, "total": 10**401}, None, id="both-past-a-float"),
        pytest.param({"progress": 3, "total": 0}, None, id="total-zero"),
        pytest.param({"progress": 11, "total": 10}, None, id="past-total"),
        pytest.param(None, None, id="none"),
    ],
)
def test_progress_bar_from_a_detail(detail: dict[str, Any] | None, expected: Progress) -> None:
    assert progress_of(detail) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(microseconds=850), "850µs"),
        (timedelta(microseconds=1), "1µs"),
        (timedelta(milliseconds=12), "12ms"),
        (timedelta(seconds=1.2), "1.20s"),
        (timedelta(hours=1, minutes=30), "1h30m"),
    ],
)
def test_durations_below_a_millisecond_read_in_microseconds(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize(
    ("ago", "text"),
    [
        (timedelta(0), "just now"),
        (timedelta(seconds=42), "42 s ago"),
        (timedelta(minutes=3, seconds=59), "3 min ago"),
        (timedelta(hours=5), "5 h ago"),
        (timedelta(days=2, hours=23), "2 d ago"),
        (-timedelta(seconds=2), "in 2 s"),
    ],
)
def test_relative_times(ago: timedelta, text: str) -> None:
    assert format_ago(T0 - ago, T0) == text
