"""The attempt diff of ``serve`` (`attempt_diff`): ``/jobs/{domain}/{job_id}/diff?a=&b=`` draws two
attempts' waterfalls on one time axis, each measured from its own attempt's start, the first
divergence marked; ``/api/...`` gives the same as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from .._cli.formatting import format_duration
from .._core.vocabulary import MAX_ATTEMPT
from ..errors import ConfigurationError
from ..query import AttemptDiff, AttemptSide, StepPair
from .layout import TICKS
from .pages import Pages
from .parsing import integer_param, job_key
from .rendering import json_response

__all__ = ["DiffBar", "DiffLane", "DiffPages", "DiffView", "lay_out_diff"]

AXIS = 1000  # the width of a bar's track in SVG units (viewBox 0 0 1000 12)
MIN_BAR = 2.0  # a step too short to see is still drawn this wide


@dataclass(frozen=True, slots=True)
class DiffBar:
    """One step of a lane: where it starts on the axis (``x``) and how wide it is, both in
    `AXIS` units; ``offset`` is its start after its attempt's start."""

    pair: StepPair
    status: str
    offset: timedelta
    duration: timedelta | None
    x: float
    width: float
    diverges: bool


@dataclass(frozen=True, slots=True)
class DiffLane:
    """One attempt's steps in the order they started."""

    side: AttemptSide
    bars: tuple[DiffBar, ...]


@dataclass(frozen=True, slots=True)
class DiffView:
    """The page's drawing: the two lanes over ``span``, the longer attempt's length."""

    diff: AttemptDiff
    lanes: tuple[DiffLane, DiffLane]
    span: timedelta

    @property
    def tick_labels(self) -> tuple[str, ...]:
        return tuple(format_duration(self.span * i / (TICKS - 1)) for i in range(TICKS))


def lay_out_diff(diff: AttemptDiff) -> DiffView:
    """Both attempts on one axis from 0 (each attempt's start) to the end of the longer one (its
    final row, or its last step's end); a step still running reaches the time of the read."""
    index, as_of = diff.divergence_index, diff.as_of
    sides = []
    for side, on_a in ((diff.a, True), (diff.b, False)):
        runs = sorted(
            (run for i, pair in enumerate(diff.steps) if (run := _run(pair, on_a, i == index))),
            key=lambda run: run.started,
        )
        start = min([*(run.started for run in runs), side.started_at or as_of])
        ends = [run.started + run.length(as_of) for run in runs]
        end = max([*ends, side.ended_at or start])
        sides.append((side, runs, start, end))
    span = max(max(end - start for *_, start, end in sides), timedelta(milliseconds=1))
    lanes = [
        DiffLane(side, tuple(run.bar(start, span, as_of) for run in runs))
        for side, runs, start, _ in sides
    ]
    return DiffView(diff, (lanes[0], lanes[1]), span)


class _Run(NamedTuple):
    """One side of a pair that ran."""

    pair: StepPair
    started: datetime
    status: str
    duration: timedelta | None
    diverges: bool

    def length(self, as_of: datetime) -> timedelta:
        return as_of - self.started if self.duration is None else self.duration

    def bar(self, start: datetime, span: timedelta, as_of: datetime) -> DiffBar:
        offset = self.started - start
        return DiffBar(
            pair=self.pair,
            status=self.status,
            offset=offset,
            duration=self.duration,
            x=_units(offset, span),
            width=max(_units(self.length(as_of), span), MIN_BAR),
            diverges=self.diverges,
        )


def _run(pair: StepPair, on_a: bool, diverges: bool) -> _Run | None:
    """Side a or b of a pair, None where that attempt did not run it."""
    if on_a:
        started, status, took = pair.a_started_at, pair.a_status, pair.a_duration
    else:
        started, status, took = pair.b_started_at, pair.b_status, pair.b_duration
    if started is None or status is None:
        return None
    return _Run(pair, started, status, took, diverges)


def _units(value: timedelta, span: timedelta) -> float:
    return round(min(max(value / span, 0.0), 1.0) * AXIS, 2)


def attempt_numbers(request: Request) -> tuple[int, int]:
    """``?a=&b=``: the two attempt numbers to compare, both required."""
    a, b = integer_param(request, "a", MAX_ATTEMPT), integer_param(request, "b", MAX_ATTEMPT)
    if a is None or b is None:
        raise ConfigurationError("a and b (the attempt numbers to compare) are required")
    return a, b


class DiffPages:
    """The diff's page and its JSON, read through the `Pages`' reader."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages

    def _read(self, request: Request) -> tuple[str, str, int, int, AttemptDiff | None]:
        domain, job_id = job_key(request)
        a, b = attempt_numbers(request)
        return domain, job_id, a, b, self.pages.reader.attempt_diff(domain, job_id, a, b)

    def page(self, request: Request) -> Response:
        domain, job_id, a, b, diff = self._read(request)
        if diff is None:
            return self.pages.render(
                "missing.html", 404, domain=domain, job_id=job_id, attempt=f"{a} or {b}"
            )
        return self.pages.render("diff.html", view=lay_out_diff(diff), diff=diff)

    def api(self, request: Request) -> Response:
        _, _, a, b, diff = self._read(request)
        if diff is None:
            return json_response({"error": f"no such job, or it has no attempt {a} or {b}"}, 404)
        return json_response(diff)
