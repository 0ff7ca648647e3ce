"""Log lines read back (pure logic): a LOG row's detail as LogLine fields, whatever job code or
another writer left in it, and the shared formatters of their messages and severities."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from otel_jobsteps._cli.formatting import LINE_CHARS, severity_word, shorten
from otel_jobsteps._cli.timeline import Style, render_log_line
from otel_jobsteps.query import LogLine

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
ROW = {"attempt": 2, "step_key": "RENDER", "message": "hello", "trace_id": "a" * 32}


@pytest.mark.parametrize(
    ("detail", "severity", "attributes", "dropped"),
    [
        pytest.param(
            {"severity": "WARN", "attributes": {"k": 1}}, "WARN", {"k": 1}, None, id="line"
        ),
        pytest.param(
            {"severity": "WARN", "dropped": 7, "attributes": {}}, "WARN", {}, 7, id="drops"
        ),
        pytest.param(None, None, None, None, id="no-detail"),
        pytest.param(["not", "a", "map"], None, None, None, id="a-list"),
        pytest.param(
            {"severity": 9, "attributes": "x", "dropped": True}, None, None, None, id="odd"
        ),
    ],
)
def test_a_rows_detail_becomes_fields(
    detail: Any, severity: str | None, attributes: dict[str, Any] | None, dropped: int | None
) -> None:
    line = LogLine.from_row(ROW, time=T0, detail=detail)

    assert (line.severity, line.attributes, line.dropped) == (severity, attributes, dropped)
    assert (line.attempt, line.step_key, line.message, line.span_id) == (2, "RENDER", "hello", None)


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("INFO", "INFO"),
        ("WARNING", "WARN"),
        ("warn3", "WARN"),
        ("ERROR2", "ERROR"),
        ("FATAL", "FATAL"),
        ("DEBUG4", "DEBUG"),
        ("TRACE", "TRACE"),
        ("notice", "INFO"),
        (None, "INFO"),
        ("", "INFO"),
    ],
)
def test_severity_families(text: str | None, word: str) -> None:
    assert severity_word(text) == word


def test_long_messages_are_cut_and_say_so() -> None:
    assert shorten("short") == "short"
    cut = shorten("x" * (LINE_CHARS + 5))
    assert cut == "x" * LINE_CHARS + "… (5 more characters)"


def test_a_terminal_line_neutralises_controls_in_every_part() -> None:
    line = LogLine(1, "K\x1b[2J", T0, "WARN\x07", "a\rb\nc\u202e", None, None, None, None)

    shown = render_log_line(line, Style(color=True), "d / j #1")

    assert "\x1b[2J" not in shown
    assert "\x07" not in shown
    assert "\r" not in shown
    assert "\u202e" not in shown
    assert "K\\x1b[2J" in shown
    assert "a\\rb\\nc\\u202e" in shown
    assert "\x1b[33m" in shown  # the severity's own colour, from us
    between = LogLine(1, None, T0, None, None, None, None, None, None)
    assert render_log_line(between, Style(color=False)).split()[-2:] == ["-", "-"]
