"""Log records in the one translation and the recorder: progress, LOG rows, severity, the cap."""

from __future__ import annotations

from typing import Any

import pytest

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor
from otel_jobsteps._core.batch import EventRow
from otel_jobsteps._core.commands import Command, LogRecorded, ProgressReported
from otel_jobsteps._core.facts import LogFacts, SpanEvent
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.translate import (
    MAX_LOG_MESSAGE_CHARS,
    SpanTranslator,
    logs_settings,
    severity_name,
    severity_number,
)
from otel_jobsteps._core.vocabulary import LOG, STEP
from otel_jobsteps._live.settings import Settings
from otel_jobsteps.errors import ConfigurationError
from otel_jobsteps.testing import InMemoryStore
from tests.unit.recorder_support import MS, settle, written
from tests.unit.test_translate import JOB, TRACE, span


def record(
    span_id: int,
    at_ms: int,
    body: Any = "line",
    *,
    severity: int = 9,
    text: str | None = None,
    event: str | None = None,
    **attributes: Any,
) -> LogFacts:
    return LogFacts(TRACE, span_id, at_ms * MS, event, severity, text, body, attributes)


JOB_SPAN = span(1, 0, 0, 100, JOB)
RENDER = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER"})
PLAIN = span(3, 2, 12, 30, {"db.system": "postgresql"})


def translated(*records: LogFacts, min_severity: int = 9, ended: bool = True) -> list[Command]:
    """The commands of the job with RENDER (and a plain span in it), ``records`` in between."""
    translator = SpanTranslator(problem=lambda *_: None, logs_min_severity=min_severity)
    commands = translator.started(JOB_SPAN) + translator.started(RENDER)
    commands += translator.started(PLAIN)
    for one in records:
        commands += translator.log(one)
    if ended:
        commands += translator.ended(PLAIN) + translator.ended(RENDER) + translator.ended(JOB_SPAN)
    return commands


def rows(commands: list[Command], **options: Any) -> list[EventRow]:
    recorder = StepRecorder(debounce_ms=0, **options)
    for command in commands:
        recorder.handle(command)
    return settle(written(recorder.take_batch()))


def logs(found: list[EventRow]) -> list[tuple[str | None, str | None, Any]]:
    return [(row.step_key, row.message, row.detail) for row in found if row.type == LOG]


def test_log_lines_get_the_step_of_their_context_and_their_severity() -> None:
    commands = translated(
        record(1, 5, "before", text="INFO"),  # the job span's own context: between steps
        record(2, 15, "in the step", severity=13, text="WARN", code="x"),
        record(3, 20, "in a plain span", severity=17),
        record(9, 21, "not in any open span"),
        record(2, 22, "debug", severity=5, text="DEBUG"),
    )
    assert logs(rows(commands)) == [
        (None, "before", {"severity": "INFO", "attributes": {}}),
        ("RENDER", "in the step", {"severity": "WARN", "attributes": {"code": "x"}}),
        ("RENDER", "in a plain span", {"severity": "ERROR", "attributes": {}}),
    ]
    log_row = next(row for row in rows(commands) if row.type == LOG and row.step_key)
    assert (log_row.step_status, log_row.ended_us, log_row.created_us) == (None, None, 15_000)
    assert (log_row.trace_id, log_row.span_id) == (f"{TRACE:032x}", f"{2:016x}")


def test_the_minimum_severity_is_a_setting_and_text_names_an_unset_number() -> None:
    commands = translated(
        record(2, 15, "debug", severity=5), record(2, 16, "named", severity=0, text="warning")
    )
    assert [m for _, m, _ in logs(rows(commands))] == ["named"]
    every = translated(record(2, 15, "debug", severity=5), min_severity=1)
    assert [m for _, m, _ in logs(rows(every))] == ["debug"]


@pytest.mark.parametrize(
    ("setting", "number"),
    [("INFO", 9), ("warn", 13), ("WARNING", 13), ("error2", 18), ("17", 17), (0, 0), ("FATAL", 21)],
)
def test_severity_settings(setting: object, number: int) -> None:
    assert severity_number(setting) == number


@pytest.mark.parametrize("setting", ["LOUD", "25", -1, True, "", None])
def test_bad_severity_settings_are_refused(setting: object) -> None:
    with pytest.raises(ConfigurationError):
        severity_number(setting)


def test_severity_names() -> None:
    assert [severity_name(n) for n in (0, 1, 9, 10, 13, 24, 99)] == [
        "UNSPECIFIED", "TRACE", "INFO", "INFO2", "WARN", "FATAL4", "UNSPECIFIED",
    ]  # fmt: skip


def test_progress_log_records_are_the_steps_detail_and_the_newest_by_time_wins() -> None:
    newer_log = translated(
        record(3, 20, None, event="progress", pct=10),
        record(2, 25, None, event="progress", pct=60),
        record(2, 24, None, event="progress", pct=50),  # older than one passed on: ignored
    )
    assert [c.attributes for c in newer_log if type(c) is ProgressReported] == [
        {"pct": 10},
        {"pct": 60},
    ]
    (step,) = [row for row in rows(newer_log) if row.type == STEP]
    assert step.detail == {"pct": 60}
    assert logs(rows(newer_log)) == []  # progress is not a log line

    # A span event newer than the log record wins at the step's close; an older one does not.
    for event_ms, expected in ((30, {"pct": 99}), (21, {"pct": 60})):
        translator = SpanTranslator(problem=lambda *_: None)
        commands = translator.started(JOB_SPAN) + translator.started(RENDER)
        commands += translator.log(record(2, 25, None, event="progress", pct=60))
        events = (SpanEvent("p", event_ms * MS, {"pct": 99}),)
        ended = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER"}, events)
        commands += translator.ended(ended) + translator.ended(JOB_SPAN)
        (step,) = [row for row in rows(commands) if row.type == STEP]
        assert step.detail == expected


def test_progress_outside_a_step_is_nothing() -> None:
    commands = translated(record(1, 5, event="progress", pct=1))
    assert [c for c in commands if type(c) is ProgressReported] == []


def test_the_per_step_cap_counts_what_it_drops_in_one_row() -> None:
    lines = [record(2, 15 + i // 10, f"line {i}") for i in range(7)]
    lines += [record(1, 50, f"between {i}") for i in range(4)]
    found = logs(rows(translated(*lines), logs_max_per_step=3))
    assert [m for _, m, _ in found] == [
        "line 0", "line 1", "line 2", "between 0", "between 1", "between 2",
        "4 log lines dropped (over the cap of 3 per step)",  # at the step's close
        "1 log lines dropped (over the cap of 3 per step)",  # at the attempt's end
    ]  # fmt: skip
    assert [(key, detail["dropped"], detail["severity"]) for key, _, detail in found[6:]] == [
        ("RENDER", 4, "WARN"),
        (None, 1, "WARN"),
    ]


def test_hostile_bodies_become_safe_text() -> None:
    deep: Any = "x"
    for _ in range(10_000):
        deep = {"k": deep}
    commands = translated(
        record(2, 15, "a\x00b\x1b[31m\ud800"),
        record(2, 16, "y" * 1_000_000),
        record(2, 17, deep),
        record(2, 18, b"\xff\x00bytes"),
        record(2, 19, {"n": 1, "l": [1, 2.5, None]}),
    )
    messages = [c.message for c in commands if type(c) is LogRecorded]
    assert messages[0] == "a\ufffdb\x1b[31m\ufffd"  # terminals and pages escape the rest
    assert len(messages[1]) < MAX_LOG_MESSAGE_CHARS + 50
    assert messages[1].endswith(f"... [{1_000_000 - MAX_LOG_MESSAGE_CHARS} more characters cut]")
    assert messages[2] == "<log body nested too deep to show>"
    assert messages[3] == "\ufffd\ufffdbytes"
    assert messages[4] == '{"n": 1, "l": [1, 2.5, null]}'
    rows(commands)  # the recorder takes them all


def test_big_attributes_are_cut_to_fit_the_detail_and_a_stack_trace_keeps_its_end() -> None:
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "OSError: disk full"
    (line,) = [
        c
        for c in translated(record(2, 15, "failed", **{"exception.stacktrace": trace, "x": 1}))
        if type(c) is LogRecorded
    ]
    kept = line.attributes["exception.stacktrace"]
    assert kept.endswith("OSError: disk full")
    assert kept.startswith(f"[{len(trace) - 4096} characters cut] ...")
    assert line.attributes["x"] == 1
    assert "_dropped_attributes" not in line.attributes
    many = {f"a{n}": n for n in range(100)}
    (line,) = [c for c in translated(record(2, 15, "many", **many)) if type(c) is LogRecorded]
    assert len(line.attributes) == 65
    assert line.attributes["_dropped_attributes"] == 36
    small = {"code.line.number": 3}
    (line,) = [c for c in translated(record(2, 15, "small", **small)) if type(c) is LogRecorded]
    assert line.attributes == small


def test_logs_settings_from_arguments_then_the_environment_given() -> None:
    assert logs_settings(None, None, environ={}) == (9, 1000)
    environ = {"OTEL_JOBSTEPS_LOGS_MIN_SEVERITY": "warn", "OTEL_JOBSTEPS_LOGS_MAX_PER_STEP": "50"}
    assert logs_settings(None, None, environ=environ) == (13, 50)
    assert logs_settings("DEBUG", 7, environ=environ) == (5, 7)
    for bad in ("0", "-3", "many"):
        with pytest.raises(ConfigurationError, match="OTEL_JOBSTEPS_LOGS_MAX_PER_STEP"):
            logs_settings(None, None, environ={"OTEL_JOBSTEPS_LOGS_MAX_PER_STEP": bad})


def test_each_door_reads_the_logs_settings_from_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_JOBSTEPS_LOGS_MIN_SEVERITY", "warn")
    monkeypatch.setenv("OTEL_JOBSTEPS_LOGS_MAX_PER_STEP", "50")
    settings = Settings.from_environment(has_store=True)
    assert (settings.logs_min_severity, settings.logs_max_per_step) == (13, 50)
    monkeypatch.setenv("OTEL_JOBSTEPS_LOGS_MAX_PER_STEP", "many")
    with pytest.raises(ConfigurationError, match="OTEL_JOBSTEPS_LOGS_MAX_PER_STEP"):
        Settings.from_environment(has_store=True)
    with pytest.raises(ConfigurationError):
        JobStepsProcessor(store=InMemoryStore(), logs_min_severity="LOUD")
