"""A job's derivation state kept between requests (``otlp_job.state``), so that a request whose
spans all come after what was applied resumes it instead of deriving the job from all its
spans: the translators' open spans, the recorder's open attempts, and the attempts' notes.

Stored as a format, not as objects: compact JSON with a version ``"v"`` and named fields
(docs/ingest.md, "The stored state"), naming no module, so moving code never changes what is
stored. A state that does not read (none kept, a pickle of an earlier release, another version,
damaged) is no state: the job is derived in full.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._core.attempts import Attempt as OpenAttempt
from .._core.attempts import OpenStep
from .._core.batch import EventRow
from .._core.commands import Scope
from .._core.recorder import StepRecorder
from .._core.translate import SpanTranslator, _OpenSpan
from .place import Attempt

__all__ = ["JobState", "capture", "dump", "held_by_job", "load", "restore"]

FORMAT_VERSION = 1  # a change of what a field means, or a field a reader needs, is a new one

Node = tuple[str, int]  # trace, signed span id


@dataclass(slots=True)
class JobState:
    """What a derivation of one job leaves to the next: the latest time it applied, per trace
    the translator's open spans, the recorder's open attempts of the job, start markers whose
    ended copy is not staged, attempts whose job span ended, and each attempt's first start."""

    frontier: int
    last_start: int = 0  # the latest start applied (a span starting then may tie with it)
    last_log: int = 0  # the latest record applied
    translators: dict[int, Any] = field(default_factory=dict)
    attempts: list[tuple[tuple[int, int], Any]] = field(default_factory=list)
    markers: dict[Attempt, set[Node]] = field(default_factory=dict)
    ended: set[Attempt] = field(default_factory=set)
    firsts: dict[Attempt, tuple[str, int, int]] = field(default_factory=dict)

    def holds_open(self, trace_id: int, span_id: int) -> bool:
        """Whether the span started and did not end in what was applied."""
        open_spans = self.translators.get(trace_id)
        return open_spans is not None and span_id in open_spans

    def open_rows(self) -> list[tuple[str, str, int, str | None, str | None]]:
        """(domain, job, attempt, step key, execution) of every step row it holds open, and
        (domain, job, attempt, None, None) of every attempt it holds open."""
        found: list[tuple[str, str, int, str | None, str | None]] = []
        for _, attempt in self.attempts:
            scope = attempt.scope
            found.append((scope.domain, scope.job_id, scope.attempt, None, None))
            if attempt.open is not None:
                key = attempt.open.key
                found.append((scope.domain, scope.job_id, scope.attempt, key, attempt.execution_id))
        return found


def held_by_job(recorder: StepRecorder) -> dict[tuple[str, str], list[tuple[Any, Any]]] | None:
    """The recorder's open attempts grouped by job; None when it forgot attempts (a state
    would be partial)."""
    held = recorder.held_attempts()
    if held is None:
        return None
    found: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
    for key, attempt in held:
        found.setdefault((attempt.scope.domain, attempt.scope.job_id), []).append((key, attempt))
    return found


def capture(
    translators: dict[int, SpanTranslator],
    attempts: list[tuple[Any, Any]] | None,
    state: JobState,
) -> JobState | None:
    """``state`` completed with the open spans of ``translators`` and the job's open
    ``attempts`` (`held_by_job`); None without them."""
    if attempts is None:
        return None
    state.translators = {trace: t.held_spans() for trace, t in translators.items()}
    state.attempts = attempts
    return state


def restore(state: JobState, recorder: StepRecorder, translator: Any) -> dict[int, SpanTranslator]:
    """Put the state's attempts into ``recorder`` and return its translators (``translator()``
    makes an empty one); the restored rows are written already and no progress is waiting."""
    for key, attempt in state.attempts:
        if attempt.open is not None:
            attempt.open.row.segment = -1  # not in the batch being built: later writes update
            attempt.open.last_write = attempt.open.pending = attempt.open.due = None
        recorder.adopt_attempt(key, attempt)
    translators: dict[int, SpanTranslator] = {}
    for trace, open_spans in state.translators.items():
        translators[trace] = found = translator()
        found.adopt_spans(open_spans)
    return translators


def dump(state: JobState) -> bytes | None:
    """The state as stored; None if it cannot be (then the job is derived in full next time)."""
    try:
        text = _COMPACT.encode(_encoded(state))
    except (TypeError, ValueError, RecursionError):  # a value JSON has no word for
        return None
    return text.encode("ascii")


def load(blob: bytes | None) -> JobState | None:
    """The stored state, or None (none kept, another version, or not a state)."""
    if blob is None or blob[:1] != b"{":  # an earlier release's pickle starts with 0x80
        return None
    try:
        found = json.loads(blob)
        if found.get("v") != FORMAT_VERSION:
            return None
        return _decoded(found)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        return None


_COMPACT = json.JSONEncoder(separators=(",", ":"))
_SCOPE = ("domain", "job_id", "job_type", "attempt", "execution", "trace_id", "span_id",
          "deadline_ns")  # fmt: skip
_ROW = ("domain", "job_id", "job_type", "attempt", "type", "step_key", "step_status", "detail",
        "message", "trace_id", "span_id", "execution_id", "created_us", "ended_us")  # fmt: skip
_ATTEMPT = ("execution_id", "trace_hex", "last_step", "last_close_us", "start_us", "forgotten",
            "resumed")  # fmt: skip


def _encoded(state: JobState) -> dict[str, Any]:
    """The state as JSON values; scopes once each, named by their place in ``scopes``."""
    scopes: dict[Scope, int] = {}

    def scope(value: Scope) -> int:
        return scopes.setdefault(value, len(scopes))

    spans = [
        {"trace": trace, "open": [_span(span_id, held, scope) for span_id, held in spans.items()]}
        for trace, spans in state.translators.items()
    ]
    attempts = [_attempt(key, attempt, scope) for key, attempt in state.attempts]
    return {
        "v": FORMAT_VERSION,
        "frontier": state.frontier,
        "last_start": state.last_start,
        "last_log": state.last_log,
        "scopes": [dict(zip(_SCOPE, value, strict=True)) for value in scopes],
        "spans": spans,
        "attempts": attempts,
        "markers": [
            {"attempt": list(where), "spans": sorted(map(list, nodes))}
            for where, nodes in state.markers.items()
        ],
        "ended": sorted(map(list, state.ended)),
        "firsts": [
            {"attempt": list(where), "first": list(first)} for where, first in state.firsts.items()
        ],
    }


def _span(span_id: int, held: _OpenSpan, scope: Callable[[Scope], int]) -> dict[str, Any]:
    return {
        "id": span_id,
        "scope": scope(held.scope),
        "key": held.key,
        "reported": None if held.reported is None else dict(held.reported),
        "step_id": held.step_id,
        "progress_ns": held.progress_ns,
        "logged_error": held.logged_error,  # optional: an older state has none
    }


def _attempt(
    key: tuple[int, int], attempt: OpenAttempt, scope: Callable[[Scope], int]
) -> dict[str, Any]:
    """An open attempt; its open step's debounce is not kept (nothing waits once written)."""
    found: dict[str, Any] = {"job_span": list(key), "scope": scope(attempt.scope)}
    found.update((name, getattr(attempt, name)) for name in _ATTEMPT)
    found["logs"] = None if attempt.logs is None else [[k, n] for k, n in attempt.logs.items()]
    step = attempt.open
    found["open"] = None
    if step is not None:
        row = {name: getattr(step.row, name) for name in _ROW}
        found["open"] = {"key": step.key, "holders": step.holders, "row": row}
    return found


def _decoded(found: dict[str, Any]) -> JobState:
    scopes = [Scope(*(value[name] for name in _SCOPE)) for value in found["scopes"]]
    state = JobState(found["frontier"], found["last_start"], found["last_log"])
    for spans in found["spans"]:
        state.translators[spans["trace"]] = OrderedDict(
            (
                held["id"],
                _OpenSpan(
                    scopes[held["scope"]],
                    held["key"],
                    held["reported"],
                    held["step_id"],
                    held["progress_ns"],
                    held.get("logged_error"),
                ),
            )
            for held in spans["open"]
        )
    for value in found["attempts"]:
        attempt = OpenAttempt(scopes[value["scope"]], value["execution_id"], value["trace_hex"])
        for name in _ATTEMPT[2:]:
            setattr(attempt, name, value[name])
        logs = value["logs"]
        attempt.logs = None if logs is None else {key: counts for key, counts in logs}
        step = value["open"]
        if step is not None:
            row = EventRow(*(step["row"][name] for name in _ROW))
            attempt.open = OpenStep(step["key"], row, attempt, step["holders"])
        trace, span_id = value["job_span"]
        state.attempts.append(((trace, span_id), attempt))
    for marker in found["markers"]:
        state.markers[_place(marker["attempt"])] = {(t, s) for t, s in marker["spans"]}
    state.ended = {_place(where) for where in found["ended"]}
    for first in found["firsts"]:
        trace, span_id, start_ns = first["first"]
        state.firsts[_place(first["attempt"])] = (trace, span_id, start_ns)
    return state


def _place(value: list[Any]) -> Attempt:
    domain, job_id, attempt = value
    return (domain, job_id, attempt)
