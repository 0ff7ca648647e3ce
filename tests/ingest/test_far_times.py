"""Far times through collect: OTLP's unsigned nanoseconds hold 1970 to 2554, which both doors
write alike; a time beyond what the wire can carry is refused as a bad request. Every read of
the rows answers afterwards."""

from __future__ import annotations

import json
import uuid

from opentelemetry.trace import Tracer, set_span_in_context

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.requests import post, request_of
from tests.ingest.stories import Recording
from tests.reads import assert_every_read_answers

LAST_NS = 2**64 - 1  # the latest time OTLP's fixed64 holds: 2554
JSON = {"content-type": "application/json"}
FIRST_NS = 1  # the earliest a span can start (0 is "unset")


def _edges(tracer: Tracer, suffix: str) -> None:
    """A job at the start of 1970 whose step runs at the end of what OTLP holds, and back."""
    for job_id, job_start, step_start in (("late", FIRST_NS, LAST_NS), ("early", LAST_NS, 1)):
        attributes = {JOB_DOMAIN: "far", JOB_ID: job_id + suffix, JOB_TYPE: "t", JOB_ATTEMPT: 1}
        job = tracer.start_span("job", start_time=job_start, attributes=attributes)
        save = tracer.start_span(
            "save",
            context=set_span_in_context(job),
            attributes={JOB_STEP_KEY: "SAVE"},
            start_time=step_start,
        )
        save.end(end_time=step_start)
        job.end(end_time=max(job_start, step_start))


def _job_span_json(start: str) -> bytes:
    attributes = [
        {"key": JOB_DOMAIN, "value": {"stringValue": "far"}},
        {"key": JOB_ID, "value": {"stringValue": "units-mistake"}},
        {"key": JOB_ATTEMPT, "value": {"intValue": "1"}},
    ]
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "job", "attributes": attributes}
    span |= {"startTimeUnixNano": start, "endTimeUnixNano": start}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def test_collect_writes_the_edges_of_otlp_time_as_the_processor_does(
    recording: Recording, start_collect: CollectorFactory, dsn: str, second_dsn: str
) -> None:
    suffix = f"-{uuid.uuid4().hex[:8]}"
    collector = start_collect(second_dsn)
    spans = recording.spans(_edges, suffix)

    assert post(collector.traces_url, request_of(spans).SerializeToString()).status_code == 200
    for start in (str(10**21), "-5"):  # year 33658, 1969: not OTLP times
        reply = post(
            collector.traces_url, _job_span_json(start), {"content-type": "application/json"}
        )
        assert reply.status_code == 400, reply.text

    expected = table_rows(dsn, f"%{suffix}%")
    assert len(expected[0]) == 2
    assert table_rows(second_dsn, f"%{suffix}%") == expected
    assert table_rows(second_dsn, "units-mistake") == ([], [])
    assert_every_read_answers(second_dsn, [("far", "late" + suffix), ("far", "early" + suffix)])
