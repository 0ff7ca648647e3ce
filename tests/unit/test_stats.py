"""Stats.problem: counts, last_error and the rate-limited warning, for texts and for errors."""

from __future__ import annotations

import logging

import pytest

from otel_jobsteps._telemetry.stats import Stats
from otel_jobsteps.errors import MAX_MESSAGE_CHARS


class _SqlError(Exception):
    sqlstate = "08006"


def test_a_text_is_counted_and_read_back_printable_and_bounded() -> None:
    stats = Stats()
    stats.problem("evicted_spans", "line one\nline two \x1b[31m")
    assert stats.snapshot()["last_error"] == "line one / line two \\x1b[31m"
    stats.problem("evicted_spans", "x" * 5000)
    snapshot = stats.snapshot()
    assert snapshot["evicted_spans"] == 2
    assert len(snapshot["last_error"]) == MAX_MESSAGE_CHARS
    assert snapshot["last_error"].endswith("...")


def test_an_error_is_described_with_its_type_and_sqlstate() -> None:
    stats = Stats()
    stats.problem("write_failed", _SqlError("connection lost\nHINT: retry"))
    assert stats.snapshot()["last_error"] == "_SqlError [08006]: connection lost / HINT: retry"
    stats.problem("internal_error", ValueError("x" * 5000))
    last = stats.snapshot()["last_error"]
    assert last.startswith("ValueError: ")
    assert len(last) == len("ValueError: ") + MAX_MESSAGE_CHARS
    stats.problem("evicted_attempts", "after an error")
    assert stats.snapshot()["last_error"] == "after an error"


def test_one_warning_per_kind_per_interval_with_the_running_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stats = Stats(warn_interval_s=3600)
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
        for _ in range(1000):
            stats.problem("evicted_spans", "more than 10 open\nspans")
        stats.problem("evicted_attempts", "a job span never ended")
        stats.problem("evicted_spans", "again")
    assert [record.getMessage() for record in caplog.records] == [
        "otel_jobsteps evicted_spans (1 so far): more than 10 open / spans",
        "otel_jobsteps evicted_attempts (1 so far): a job span never ended",
    ]
    assert stats.get("evicted_spans") == 1001


def test_a_reset_forgets_the_last_error() -> None:
    stats = Stats()
    stats.problem("evicted_spans", "text")
    stats.reset()
    assert stats.snapshot() == {"last_error": None}
