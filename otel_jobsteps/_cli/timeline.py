"""Text rendering for the CLI: a job's attempts and steps as a timeline, and job lists.
Every string from job data passes `printable`: an escape sequence must not reach a terminal."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

from ..errors import printable
from ..query import AttemptSummary, JobDetail, JobSummary, LogLine, StepRecord
from .formatting import format_duration, format_time, severity_word, shorten

__all__ = [
    "BAR_WIDTH",
    "Style",
    "render_detail",
    "render_jobs",
    "render_log_line",
]

BAR_WIDTH = 40
_STATUS_COLORS = {"COMPLETED": "32", "FAILED": "1;31", "RUNNING": "33", "SKIPPED": "2"}
_DETAIL_CHARS = 60
_SEVERITY_COLORS = {"WARN": "33", "ERROR": "1;31", "FATAL": "1;31", "DEBUG": "2", "TRACE": "2"}


class Style:
    """How to draw: ANSI colours or none, block characters or ASCII."""

    def __init__(self, *, color: bool, unicode: bool = True) -> None:
        self.color = color
        self.bar = "█" if unicode else "#"
        self.track = "·" if unicode else "."

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        """Colour only on a terminal, and not when NO_COLOR is set or TERM is dumb."""
        color = (
            stream.isatty()
            and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM", "") != "dumb"
        )
        try:
            "█·".encode(stream.encoding or "ascii")
            unicode = True
        except (LookupError, UnicodeEncodeError):
            unicode = False
        return cls(color=color, unicode=unicode)

    def paint(self, text: str, code: str | None) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color and code else text

    def status(self, text: str, status: str) -> str:
        """``text`` (already padded) in the colour of ``status``."""
        return self.paint(text, _STATUS_COLORS.get(status))


def _compact(detail: dict[str, Any] | None) -> str:
    if not detail:
        return ""
    text = printable(json.dumps(detail, separators=(", ", ": "), ensure_ascii=False, default=str))
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


def _attempt_line(summary: AttemptSummary, as_of: datetime, style: Style) -> str:
    end = summary.ended_at or as_of
    took = end - summary.started_at if summary.started_at else None
    where = printable(summary.open_step or summary.last_step or "")
    if summary.status == "FAILED":
        error = f": {printable(summary.error)}" if summary.error else ""
        note = f"failed at {where or '?'}{error}"
        note = style.paint(note, _STATUS_COLORS["FAILED"])
    elif summary.status == "RUNNING":
        note = f"running {where}" if where else "running, no step yet"
    else:
        note = ""
    status = style.status(f"{summary.status:<9}", summary.status)
    return (
        f"  #{summary.attempt:<3} {status}  {printable(summary.reason or ''):<14} "
        f"{format_time(summary.started_at):<29}  {format_duration(took):>8}  {note}".rstrip()
    )


def _attempt_lines(detail: JobDetail, style: Style) -> list[str]:
    """The attempts listed, each after a line that counts the ones left out before it."""
    gaps = {gap.before: gap.count for gap in detail.attempt_gaps}
    lines = []
    for summary in detail.attempts:
        hidden = gaps.get(summary.attempt)
        if hidden:
            more = f"{hidden} earlier attempt{'' if hidden == 1 else 's'}"
            lines.append(f"  ... {more} (--before-attempt {summary.attempt})")
        lines.append(_attempt_line(summary, detail.as_of, style))
    return lines


def _bar(step: StepRecord, start: datetime, total: float, as_of: datetime, style: Style) -> str:
    end = step.ended_at or as_of
    first = int((step.started_at - start).total_seconds() / total * BAR_WIDTH)
    last = math.ceil((end - start).total_seconds() / total * BAR_WIDTH)
    first = min(max(first, 0), BAR_WIDTH - 1)
    last = min(max(last, first + 1), BAR_WIDTH)
    filled = style.status(style.bar * (last - first), step.status)
    return style.track * first + filled + style.track * (BAR_WIDTH - last)


def _step_line(
    step: StepRecord, key_width: int, start: datetime, total: float, as_of: datetime, style: Style
) -> str:
    bar = _bar(step, start, total, as_of, style)
    took = step.duration if step.ended_at else as_of - step.started_at
    if step.status == "FAILED":
        message = printable(step.message or "no message")
        note = style.paint(f"<- FAILED: {message}", _STATUS_COLORS["FAILED"])
    elif step.status == "RUNNING":
        note = style.status("<- running", "RUNNING")
    else:
        note = ""
    detail = _compact(step.detail)
    status = style.status(f"{step.status:<9}", step.status)
    return (
        f"  {printable(step.key):<{key_width}}  {status}  |{bar}|  {format_duration(took):>8}  "
        f"{note}{'  ' if note and detail else ''}{detail}".rstrip()
    )


def _steps_section(detail: JobDetail, style: Style) -> list[str]:
    lines = [f"steps of attempt {detail.current_attempt}:"]
    if not detail.steps:
        return [*lines, "  (no steps yet)"]
    start = detail.steps[0].started_at
    ends = [s.ended_at or detail.as_of for s in detail.steps]
    total = max((max(ends) - start).total_seconds(), 1e-6)
    width = max(len(printable(s.key)) for s in detail.steps)
    lines += [_step_line(s, width, start, total, detail.as_of, style) for s in detail.steps]
    scale = format_duration(timedelta(seconds=total))
    lines.append(" " * (width + 16) + f"0{scale:>{BAR_WIDTH - 1}}")
    return lines


def render_log_line(line: LogLine, style: Style, where: str = "") -> str:
    """One log line for a terminal: time, ``where`` (already printable), severity, step (``-``
    between steps) and message (cut at `LINE_CHARS`), each through `printable`."""
    severity = printable(shorten(line.severity or "-", 12))
    painted = style.paint(f"{severity:<5}", _SEVERITY_COLORS.get(severity_word(line.severity)))
    step = printable(line.step_key) if line.step_key is not None else "-"
    message = printable(shorten(line.message or ""))
    parts = (format_time(line.time), where, painted, step, message)
    return "  ".join(part for part in parts if part).rstrip()


def _logs_section(detail: JobDetail, style: Style) -> list[str]:
    lines = [f"log lines of attempt {detail.current_attempt}:"]
    if not detail.logs:
        return [*lines, "  (no log lines)"]
    return lines + ["  " + render_log_line(line, style) for line in detail.logs]


def render_detail(detail: JobDetail, style: Style, *, logs: bool = False) -> str:
    """The `show` page: attempts with outcomes, the chosen attempt's timeline, events; with
    ``logs``, that attempt's log lines after them."""
    kind = f" ({printable(detail.job_type)})" if detail.job_type else ""
    lines = [
        f"job {printable(detail.domain)} / {printable(detail.job_id)}{kind}: "
        f"attempt {detail.current_attempt} of {detail.attempt_count}",
        "",
        "attempts:",
        *_attempt_lines(detail, style),
        "",
        *_steps_section(detail, style),
        "",
        f"processing started: {format_time(detail.processing_started_at)}",
    ]
    log = detail.log
    if log is not None:
        outcome = style.status(log.status, log.status)
        reason = f" ({printable(log.reason)})" if log.reason else ""
        lines.append(f"final: {outcome}{reason} at {format_time(log.created_at)}")
    lines.append(f"stalled events: {detail.stalled_count}")
    if detail.events:
        lines.append("events:")
        for event in detail.events:
            message = printable(event.message or "")
            text = "  ".join(part for part in (message, _compact(event.detail)) if part)
            when = format_time(event.created_at)
            kind = printable(event.type)
            lines.append(f"  #{event.attempt:<3} {when}  {kind:<16} {text}".rstrip())
    if logs:
        lines += ["", *_logs_section(detail, style)]
    return "\n".join(lines)


def render_jobs(jobs: Sequence[JobSummary], style: Style) -> str:
    """The `jobs` table, one latest attempt per line."""
    if not jobs:
        return "no jobs found"
    header = ("LAST ACTIVITY", "DOMAIN", "JOB ID", "TYPE", "ATTEMPT", "STATUS", "STEP", "REASON")
    rows = [
        (
            format_time(job.last_activity_at),
            printable(job.domain),
            printable(job.job_id),
            printable(job.job_type or "-"),
            str(job.attempt),
            job.status,
            printable(job.open_step or job.last_step or "-"),
            printable(": ".join(part for part in (job.reason, job.error) if part)),
        )
        for job in jobs
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    status_column = header.index("STATUS")

    def line(row: Sequence[str], color: bool) -> str:
        cells = [f"{cell:<{width}}" for cell, width in zip(row, widths, strict=True)]
        if color:
            cells[status_column] = style.status(cells[status_column], row[status_column])
        return "  ".join(cells).rstrip()

    return "\n".join([line(header, False), *(line(row, True) for row in rows)])
