"""The event hook on SDK spans: one report per burst, and the latest detail always read."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps.spans import LatestProgress, attribute_dict, watch_events


def test_a_burst_of_events_is_reported_once_and_read_at_its_latest() -> None:
    span = TracerProvider().get_tracer("t").start_span("s", attributes={"job.step.key": "A"})
    reports: list[tuple[Any, LatestProgress]] = []
    assert watch_events(span, lambda tag, latest: reports.append((tag, latest)), "tag")
    span.add_event("progress", {"pct": 1})
    span.add_event("progress", {"pct": 2})
    span.record_exception(ValueError("not progress"))
    assert len(reports) == 1
    tag, latest = reports[0]
    assert tag == "tag"
    assert latest() == {"pct": 2}  # the newest progress event, exceptions skipped
    span.add_event("progress", {"pct": 3})  # read once: the next event is reported again
    assert len(reports) == 2
    assert reports[1][1]() == {"pct": 3}
    assert [e.name for e in span.events] == ["progress", "progress", "exception", "progress"]


def test_attribute_dict_reads_the_plain_attributes() -> None:
    span = TracerProvider().get_tracer("t").start_span("s", attributes={"job.id": "7"})
    assert attribute_dict(span) == {"job.id": "7"}
