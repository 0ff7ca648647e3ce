"""The pure parts of the receiver: span order, the tie rule, placing, mappings, and decoding
edge cases."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from otel_jobsteps._core.commands import EventRecorded, JobEnded, JobStarted, StepEnded, StepRan
from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.facts import SpanEvent, SpanFacts
from otel_jobsteps._core.order import in_span_order, scheduled_order
from otel_jobsteps._ingest.decode import BadRequest, decode_json
from otel_jobsteps._ingest.derive import job_commands
from otel_jobsteps._ingest.mapping import JobMapping, recognise_trace
from otel_jobsteps._ingest.place import place, skeleton
from otel_jobsteps.errors import ConfigurationError

DIALECTS = select_dialects(None)  # the default set, as collect has it
JOB = {"job.domain": "d", "job.id": "1", "job.type": "t", "job.attempt": 1}


def span(span_id: int, parent: int, start: int, end: int, **attributes: Any) -> SpanFacts:
    return SpanFacts(7, span_id, parent, f"s{span_id}", start, end, attributes)


def commands(spans: list[SpanFacts], **options: Any) -> list[tuple[str, object]]:
    """The commands by type and key; a step told whole (StepRan) as its start and end."""
    options.setdefault("dialects", DIALECTS)
    found = job_commands(spans, problem=print, **options)
    named = []
    for command in found:
        label = getattr(command, "key", None) or getattr(command, "type", None)
        if isinstance(command, StepRan):
            named += [("StepStarted", label), ("StepEnded", label)]
        else:
            named.append((type(command).__name__, label))
    return named


ORDERED = [
    ("JobStarted", None),
    ("StepStarted", "A"),
    ("StepEnded", "A"),
    ("StepStarted", "B"),
    ("StepEnded", "B"),
    ("JobEnded", None),
]


@pytest.mark.parametrize(
    "spans",
    [
        pytest.param(
            [span(1, 0, 10, 40, **JOB), span(2, 1, 10, 20, **{"job.step.key": "A"}),
             span(3, 1, 20, 40, **{"job.step.key": "B"})],
            id="job first",
        ),
        pytest.param(
            [span(3, 1, 20, 40, **{"job.step.key": "B"}), span(1, 0, 10, 40, **JOB),
             span(2, 1, 10, 20, **{"job.step.key": "A"})],
            id="shuffled; shared instants: a child starts with its parent, ends with it",
        ),
        pytest.param(
            [span(2, 1, 10, 20, **{"job.step.key": "A"}),
             span(3, 1, 20, 40, **{"job.step.key": "B"}), span(1, 0, 30, 35, **JOB)],
            id="skewed clocks: the parent's times never put a child outside it",
        ),
    ],
)  # fmt: skip
def test_span_order_is_the_same_whatever_the_arrival(spans: list[SpanFacts]) -> None:
    assert commands(spans) == ORDERED


def test_a_marker_opens_and_the_ended_span_wins() -> None:
    marker = span(2, 1, 10, 0, **{"job.step.key": "A"})
    assert commands([span(1, 0, 10, 0, **JOB), marker]) == [
        ("JobStarted", None),
        ("StepStarted", "A"),
    ]
    ended = span(2, 1, 10, 20, **{"job.step.key": "A"})
    assert commands([marker, span(1, 0, 10, 30, **JOB), ended])[-2:] == [
        ("StepEnded", "A"),
        ("JobEnded", None),
    ]


def test_a_parent_cycle_does_not_hang_and_starts_nothing_in_it() -> None:
    assert commands([span(1, 2, 10, 20, **JOB), span(2, 1, 10, 20, **{"job.step.key": "A"})]) == []


def test_progress_of_a_received_step_is_its_latest_event() -> None:
    step = SpanFacts(
        7, 2, 1, "a", 10, 20, {"job.step.key": "A"},
        [SpanEvent("progress", 11, {"pct": 50}), SpanEvent("progress", 12, {"pct": 100}),
         SpanEvent("exception", 13, {"exception.type": "E"})],
    )  # fmt: skip
    job = span(1, 0, 10, 30, **JOB)
    found = job_commands([job, step], problem=print, dialects=DIALECTS)
    (ran,) = [c for c in found if isinstance(c, StepRan)]  # told whole: its newest progress
    assert ran.progress == {"pct": 100}


def test_an_event_outside_a_job_names_its_own_scope() -> None:
    event = span(5, 0, 10, 10, **{"job.event.type": "STALLED", "job.id": "1", "job.domain": "d",
                                  "job.attempt": 1})  # fmt: skip
    assert commands([event]) == [("EventRecorded", "STALLED")]


def bullmq_trace(*, failed: bool, retried: bool, made: int | None = 1) -> list[SpanFacts]:
    attributes: dict[str, Any] = {
        "bullmq.queue.name": "render",
        "bullmq.queue.operation": "process",
        "bullmq.job.id": "42",
        "bullmq.job.name": "thumbnail",
    }
    if made is not None:
        attributes["bullmq.job.attempts.made"] = made
    events = [SpanEvent("job failed", 30, {"bullmq.job.failed.reason": "disk full"})]
    job = SpanFacts(7, 1, 0, "process render", 10, 40, attributes, events if failed else [])
    spans = [job, span(2, 1, 10, 20, **{"job.step.key": "SAVE"})]
    if retried:
        spans.append(span(3, 1, 30, 31, **{"bullmq.queue.operation": "retry"}))
    return spans


def test_bullmq_failed_and_retried_is_failed_retry_with_its_event() -> None:
    found = job_commands(bullmq_trace(failed=True, retried=True), problem=print, dialects=DIALECTS)
    started = found[0]
    assert isinstance(started, JobStarted)
    assert started.scope[:4] == ("render", "42", "thumbnail", 1)
    (event,) = [c for c in found if isinstance(c, EventRecorded)]
    assert (event.type, event.detail) == ("RETRY_SCHEDULED", {"next_attempt": 2})
    ended = found[-1]
    assert isinstance(ended, JobEnded)
    assert (ended.failed, ended.outcome, ended.error) == (True, "retry", "disk full")


@pytest.mark.parametrize(
    ("failed", "retried", "expected"),
    [
        pytest.param(False, False, (False, None), id="completed"),
        pytest.param(True, False, (True, None), id="failed, no attempts left"),
    ],
)
def test_bullmq_outcomes(failed: bool, retried: bool, expected: tuple[bool, object]) -> None:
    found = job_commands(
        bullmq_trace(failed=failed, retried=retried), problem=print, dialects=DIALECTS
    )
    ended = found[-1]
    assert isinstance(ended, JobEnded)
    assert (ended.failed, ended.outcome) == expected


def test_bullmq_span_without_its_attempt_count_is_not_a_job_span() -> None:
    assert commands(bullmq_trace(failed=False, retried=False, made=None)) == []


def test_a_configured_mapping_names_other_libraries_jobs() -> None:
    mapping = JobMapping.parse(
        "id=celery.task_id,domain=celery.queue,type=celery.task,attempt=celery.retries+1"
    )
    job = span(1, 0, 10, 40, **{"celery.task_id": "x", "celery.queue": "q", "celery.task": "t",
                                "celery.retries": 2})  # fmt: skip
    mapped_by = DIALECTS.with_mappings([mapping])
    (mapped,) = recognise_trace([job], mapped_by)
    assert {k: mapped.attributes[k] for k in JOB} == {
        "job.domain": "q", "job.id": "x", "job.type": "t", "job.attempt": 3,
    }  # fmt: skip
    explicit = span(1, 0, 10, 40, **{"celery.task_id": "x", "celery.queue": "q", "job.id": "own"})
    assert recognise_trace([explicit], mapped_by)[0].attributes["job.id"] == "own"


@pytest.mark.parametrize(
    "text", ["", "id=a", "domain=a", "id=a,domain=b,id=c", "id=a+1,domain=b", "id=a,colour=b"]
)
def test_a_bad_mapping_is_a_configuration_error(text: str) -> None:
    with pytest.raises(ConfigurationError):
        JobMapping.parse(text)


@pytest.mark.parametrize(
    "body", [b"\xff", b"[]", b'{"resourceSpans": [{"scopeSpans": 3}]}', b"[" * 100_000]
)
def test_json_that_is_not_a_trace_request_is_a_bad_request(body: bytes) -> None:
    with pytest.raises(BadRequest):
        decode_json(body)


def test_json_ids_that_are_not_hex_reject_that_span_only() -> None:
    good = {"traceId": "01" * 16, "spanId": "02" * 8, "name": "a", "startTimeUnixNano": "5"}
    bad = {**good, "spanId": "zz" * 8}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [good, bad]}]}]}).encode()
    decoded = decode_json(body)
    assert (len(decoded.spans), decoded.rejected) == (1, 1)
    assert decoded.spans[0].end_ns == 0  # no end time: a start marker


def test_array_values_decode_as_the_sdk_keeps_them() -> None:
    # A tuple, as the SDK holds a sequence attribute: `job.id = ["a"]` reads ('a',) as text
    # through either door, not ['a'] through collect.
    array = {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "2"}]}}
    spans = [{"traceId": "01" * 16, "spanId": "02" * 8, "name": "a", "startTimeUnixNano": "5",
              "attributes": [{"key": "job.id", "value": array}]}]  # fmt: skip
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    assert decode_json(body).spans[0].attributes["job.id"] == ("a", 2)


def _places(spans: list[SpanFacts]) -> dict[int, object]:
    return place({s.span_id: skeleton(s, DIALECTS) for s in spans})


def test_a_span_is_placed_in_the_attempt_its_parents_lead_to() -> None:
    job = span(1, 9, 0, 100, **JOB)  # its parent (9) is the enqueuing request's: never needed
    step = span(2, 1, 10, 20, **{"job.step.key": "RENDER"})
    plain = span(3, 2, 11, 12)
    assert _places([job, step, plain]) == {1: ("d", "1", 1), 2: ("d", "1", 1), 3: ("d", "1", 1)}
    assert _places([step, plain]) == {2: None, 3: None}  # the job span is still to come
    between = span(5, 1, 5, 30)
    assert _places([span(2, 5, 10, 20, **{"job.step.key": "R"}), job])[2] is None  # 5 to come
    assert _places([span(2, 5, 10, 20, **{"job.step.key": "R"}), between, job])[2] == ("d", "1", 1)
    assert _places([job, span(2, 2, 10, 20, **{"job.step.key": "R"})])[2] is None  # own parent
    # An event names its job until its parent is known: then the parent's scope wins, as live.
    event = span(6, 7, 12, 12, **{**JOB, "job.attempt": 2, "job.event.type": "LOG"})
    assert _places([event])[6] == ("d", "1", 2)
    assert _places([event, span(7, 1, 11, 13), job])[6] == ("d", "1", 1)
    assert _places([span(8, 6, 12, 12), event, job])[8] is None  # a child of an event: outside


def test_a_step_ending_in_the_tick_the_next_starts_keeps_its_own_end() -> None:
    # One clock tick holds all of A and the start of B: A is closed by its own end (FAILED).
    job = span(1, 0, 10, 40, **JOB)
    failed = SpanFacts(7, 2, 1, "a", 20, 20, {"job.step.key": "A"}, (), True, "boom")
    after = span(3, 1, 20, 40, **{"job.step.key": "B"})
    for spans in ([job, failed, after], [after, failed, job]):
        assert commands(spans) == ORDERED
    # Zero-length job and steps in one tick: inner spans end before the job does.
    assert commands([span(1, 0, 5, 5, **JOB), span(2, 1, 5, 5, **{"job.step.key": "A"}),
                     span(3, 1, 5, 5, **{"job.step.key": "B"})]) == ORDERED  # fmt: skip


@pytest.mark.parametrize("ids", [(3, 4), (4, 3)], ids=["event's id lower", "B's id lower"])
def test_a_child_starting_as_its_step_ends_goes_before_the_next_step(ids: tuple[int, int]) -> None:
    # A's event span starts in the instant A ends and B starts (a shrunk history): A's end waits
    # for it, and B's start waits for A's end, whichever span id is the lower.
    event, after = ids
    job = span(1, 0, 5, 40, **JOB)
    failed = SpanFacts(7, 2, 1, "a", 10, 11, {"job.step.key": "A"}, (), True, "boom")
    inside = span(event, 2, 11, 11, **{"job.event.type": "LOG", "job.event.message": "in A"})
    found = commands([job, failed, inside, span(after, 1, 11, 11, **{"job.step.key": "B"})])
    assert [c for c in found if c[0] != "EventRecorded"] == ORDERED
    assert found.index(("StepEnded", "A")) > found.index(("EventRecorded", "LOG"))


MS = 1_796_298_417_223_000_000  # a whole millisecond, as Node's SDK stamps starts


@pytest.mark.parametrize("ids", [(2, 3), (3, 2)], ids=["RENDER's id lower", "SAVE's id lower"])
def test_steps_starting_in_one_millisecond_follow_their_ends(ids: tuple[int, int]) -> None:
    # Node's SDK takes a span's start from Date.now() and its end from a finer clock (times of
    # a real run): RENDER ends 0.269 ms into the millisecond SAVE's start reads as. RENDER is
    # closed by its own end and SAVE keeps its failure, whichever span id is the lower.
    render, save = ids
    job = span(1, 0, MS, MS + 11_583_050, **JOB)
    first = span(render, 1, MS, MS + 269_224, **{"job.step.key": "A"})
    failed = SpanFacts(7, save, 1, "b", MS, MS + 10_236_687, {"job.step.key": "B"}, (), True, "x")
    assert commands([job, failed, first]) == ORDERED
    found = job_commands([job, failed, first], problem=print, dialects=DIALECTS)
    ends = [c for c in found if isinstance(c, StepEnded | StepRan)]
    assert [(c.key, c.failed) for c in ends] == [("A", False), ("B", True)]
    # SAVE only started (its marker): RENDER's end still comes before SAVE's start.
    marker = span(save, 1, MS, 0, **{"job.step.key": "B"})
    assert commands([span(1, 0, MS, 0, **JOB), marker, first]) == ORDERED[:4]
    # SAVE, quick, ends before RENDER's end reads (each span's times shift by its own start's
    # truncation): RENDER started a millisecond earlier, so it still ends first.
    slow = span(render, 1, MS - 6_000_000, MS + 750_000, **{"job.step.key": "A"})
    quick = SpanFacts(7, save, 1, "b", MS, MS + 333_185, {"job.step.key": "B"}, (), True, "x")
    assert commands([span(1, 0, MS - 7_000_000, MS + 2_500_000, **JOB), quick, slow]) == ORDERED
    # A start off the whole millisecond is exact: a sibling still open then is closed by it.
    late = span(save, 1, MS + 100_000, 0, **{"job.step.key": "B"})
    assert commands([span(1, 0, MS, 0, **JOB), late, first]) == [
        ("JobStarted", None),
        ("StepStarted", "A"),
        ("StepStarted", "B"),
        ("StepEnded", "A"),
    ]


@st.composite
def _forests(draw: st.DrawFn) -> dict[tuple[int, int], SpanFacts]:
    """Spans of one or two traces, each mostly starting a little after its parent (or none,
    or a missing one), some steps, some markers; instants a quarter or a fiftieth of a
    millisecond apart around whole milliseconds: ties, zero lengths and Node-like starts, or
    (most often) every instant its own."""
    apart = draw(st.sampled_from((20_000, 250_000)))
    nodes: dict[tuple[int, int], SpanFacts] = {}
    for span_id in range(1, draw(st.integers(1, 7)) + 1):
        trace = draw(st.sampled_from((7, 7, 8)))
        parent = draw(st.integers(0, span_id + 1))
        known = nodes.get((trace, parent))
        start = (MS if known is None else known.start_ns) + draw(st.integers(-1, 40)) * apart
        length = draw(st.one_of(st.none(), st.integers(0, 40)))  # None: a start marker
        end = 0 if length is None else start + length * apart
        names = {"job.step.key": f"K{span_id}"} if draw(st.booleans()) else {}
        nodes[(trace, span_id)] = SpanFacts(trace, span_id, parent, "s", start, end, names)
    return nodes


_NODE_STEPS = {  # a step started on Node's whole millisecond, its sibling ending within it
    (7, 1): span(1, 0, MS - 5_000_001, MS + 9_000_000, **JOB),
    (7, 2): span(2, 1, MS - 1_000_001, MS + 269_224, **{"job.step.key": "A"}),
    (7, 3): span(3, 1, MS, MS + 5_000_000, **{"job.step.key": "B"}),
}


@given(_forests(), st.integers(0, 3))
@example(_NODE_STEPS, 0)
def test_ordering_by_time_alone_is_what_the_scheduler_gives(
    nodes: dict[tuple[int, int], SpanFacts], shift: int
) -> None:
    # Off the whole millisecond by ``shift`` (0: on it), times are apart often enough that most
    # draws are ordered by time alone: that shortcut must give the scheduler's order.
    moved = {node: replace(span, start_ns=span.start_ns + shift,
                           end_ns=span.end_ns and span.end_ns + shift)
             for node, span in nodes.items()}  # fmt: skip

    def ids(order: list[tuple[bool, SpanFacts]]) -> list[tuple[bool, int, int]]:
        return [(is_start, span.trace_id, span.span_id) for is_start, span in order]

    assert ids(in_span_order(moved)) == ids(scheduled_order(moved))


def test_a_step_ending_after_its_job_is_closed_by_the_job_end_as_live() -> None:
    found = commands([span(1, 0, 10, 30, **JOB), span(2, 1, 10, 40, **{"job.step.key": "A"})])
    assert found == [("JobStarted", None), ("StepStarted", "A"), ("JobEnded", None),
                     ("StepEnded", "A")]  # fmt: skip


def test_attempts_in_two_traces_meet_in_time_order() -> None:
    first = {**JOB, "job.attempt": 1}
    second = {**JOB, "job.attempt": 2}
    one = [span(1, 0, 10, 50, **first), span(2, 1, 10, 50, **{"job.step.key": "A"})]
    two = [SpanFacts(8, 1, 0, "j", 30, 60, second), SpanFacts(8, 2, 1, "s", 30, 60,
                                                             {"job.step.key": "B"})]  # fmt: skip
    found = job_commands(two + one, problem=print, dialects=DIALECTS)
    starts = [(type(c).__name__, c.scope.attempt) for c in found]
    assert starts[:3] == [("JobStarted", 1), ("StepStarted", 1), ("JobStarted", 2)]


def test_the_first_ended_copy_of_a_span_is_the_one_derived() -> None:
    # Staging keeps the first copy of a span delivered twice; the derivation must read the same.
    ok = span(1, 0, 0, 100, **JOB)
    failed = SpanFacts(7, 1, 0, "s1", 0, 100, JOB, (), True, "boom")
    (ended,) = [
        c
        for c in job_commands([ok, failed], problem=print, dialects=DIALECTS)
        if isinstance(c, JobEnded)
    ]
    assert not ended.failed
