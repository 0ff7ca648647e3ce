"""The one translation: span and log facts -> the recorder's commands, for both doors.

A job span opens a scope, a ``job.step.key`` span in it is a step, an event span a row, a log
record progress or a log line; the scope of each open span is kept (bounded). No I/O."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from .. import attributes as attr
from ..errors import ConfigurationError
from .commands import (
    Command,
    EventRecorded,
    JobEnded,
    JobStarted,
    LogRecorded,
    ProgressReported,
    Scope,
    StepEnded,
    StepRan,
    StepSkipped,
    StepStarted,
)
from .detail import clean_text, parse_detail
from .dialects.cicd import STEP_SKIPPED
from .events import EventLike, first_progress, latest_progress, plain_attributes
from .facts import RESOURCE_ATTRIBUTES, LogFacts, SpanFacts
from .limits import MAX_ID_BYTES, id_fits, job_type_text
from .recorder import DEFAULT_LOGS_MAX_PER_STEP
from .times import EARLIEST_NS, LATEST_NS, clamp_ns
from .vocabulary import MAX_ATTEMPT, MAX_ID_CHARS

__all__ = [
    "DEFAULT_LOGS_MIN_SEVERITY",
    "DEFAULT_MAX_OPEN_SPANS",
    "MAX_LOG_ATTRIBUTES",
    "MAX_LOG_ATTRIBUTES_CHARS",
    "MAX_LOG_ATTRIBUTE_CHARS",
    "MAX_LOG_MESSAGE_CHARS",
    "MAX_TAGS",
    "MAX_TAG_NAME_CHARS",
    "MAX_TAG_VALUE_CHARS",
    "SpanTranslator",
    "body_text",
    "is_exception_event",
    "is_job_identity",
    "is_step",
    "late_attributes",
    "log_line",
    "logs_settings",
    "severity_name",
    "severity_number",
]

DEFAULT_MAX_OPEN_SPANS = 100_000
MAX_TAGS = 20  # tags kept per attempt: the first by name
MAX_RESOURCE_CHARS = 256  # a resource value kept with an attempt's final row is cut here
MAX_TAG_NAME_CHARS = 64  # a longer name is dropped (cut, two names could become one)
MAX_TAG_VALUE_CHARS = 256  # a longer value is cut

DEFAULT_LOGS_MIN_SEVERITY = 9  # INFO: log records below it are not written
MAX_LOG_MESSAGE_CHARS = 8192  # a log line's message is cut here, and says so
MAX_LOG_ATTRIBUTES = 64  # attributes kept per log line (the first), within the detail's size
MAX_LOG_ATTRIBUTE_CHARS = 4096  # a longer text attribute is cut (a stack trace keeps its end)
MAX_LOG_ATTRIBUTES_CHARS = 32 * 1024  # all of a line's attributes: half the detail size limit
_STACKTRACE = "exception.stacktrace"
PROGRESS_EVENT = "progress"  # a log record's event_name that makes it a progress snapshot
# SeverityNumber ranges by their short name (OTel logs data model): 1-4 TRACE ... 21-24 FATAL.
_SEVERITY_NAMES = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
_SEVERITY_ALIASES = {"WARNING": 13, "CRITICAL": 21, "ERR": 17}

Problem = Callable[[str, object], None]
_NOTHING: Mapping[str, Any] = {}  # no progress to pass on


def severity_number(value: object) -> int:
    """A severity setting as a SeverityNumber: a name (INFO, warn, WARNING, ERROR2) or 0..24."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 24:
        return value
    if isinstance(value, str):
        text = value.strip().upper()
        if text.isdigit() and int(text) <= 24:
            return int(text)
        found = _named_severity(text)
        if found:
            return found
    raise ConfigurationError(
        f"a log severity must be a name (TRACE, DEBUG, INFO, WARN, ERROR, FATAL) or a number "
        f"0..24, got {value!r}"
    )


def logs_settings(
    min_severity: str | int | None,
    max_per_step: int | None,
    *,
    environ: Mapping[str, str],
) -> tuple[int, int]:
    """(minimum SeverityNumber, LOG rows per step): the arguments, else ``environ``'s (the door
    passes its process's environment), else INFO and 1000; a bad value raises
    ConfigurationError (both doors check them here)."""
    if min_severity is None:
        min_severity = environ.get("OTEL_JOBSTEPS_LOGS_MIN_SEVERITY") or DEFAULT_LOGS_MIN_SEVERITY
    cap: object = max_per_step
    if cap is None:
        raw = environ.get("OTEL_JOBSTEPS_LOGS_MAX_PER_STEP") or str(DEFAULT_LOGS_MAX_PER_STEP)
        cap = int(raw) if raw.strip().isdigit() else raw
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ConfigurationError(
            f"logs_max_per_step (OTEL_JOBSTEPS_LOGS_MAX_PER_STEP) must be a positive integer, "
            f"got {cap!r}"
        )
    return severity_number(min_severity), cap


def _named_severity(text: str) -> int:
    """The SeverityNumber a severity text names (INFO, INFO2, WARNING...), 0 if none."""
    if text in _SEVERITY_ALIASES:
        return _SEVERITY_ALIASES[text]
    base, step = (text[:-1], text[-1]) if text[-1:] in ("2", "3", "4") else (text, "1")
    if base in _SEVERITY_NAMES:
        return _SEVERITY_NAMES.index(base) * 4 + int(step)
    return 0


def _short_name(number: int) -> str:
    name = _SEVERITY_NAMES[(number - 1) // 4]
    step = (number - 1) % 4 + 1
    return name if step == 1 else f"{name}{step}"


_SHORT_NAMES = ("UNSPECIFIED", *(_short_name(number) for number in range(1, 25)))


def severity_name(number: int) -> str:
    """The short name of a SeverityNumber: INFO for 9, INFO2 for 10, ...; UNSPECIFIED for 0."""
    return _SHORT_NAMES[number] if 0 <= number <= 24 else "UNSPECIFIED"


def body_text(body: object) -> str:
    """A log record's body as text, uncut: a string as it is, a structure as JSON."""
    if isinstance(body, str):
        return body
    if body is None:
        return ""
    if isinstance(body, bytes | bytearray):
        return bytes(body).decode("utf-8", "replace")
    if isinstance(body, Mapping | list | tuple):
        try:
            return json.dumps(body, ensure_ascii=False, default=repr, allow_nan=True)
        except RecursionError:
            return "<log body nested too deep to show>"
        except Exception:  # noqa: BLE001 - a value's own repr may fail: the line is kept
            return "<log body that cannot be shown>"
    return clean_text(body)


def _attribute_size(name: str, value: object) -> int:
    """About how many characters an attribute takes in the detail's JSON (cheap to tell)."""
    if type(value) is str:
        return len(name) + len(value)
    if isinstance(value, list | tuple | Mapping):
        return len(name) + 16 * len(value)
    return len(name) + 16


def _log_attributes(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """A log line's attributes within the caps, so that its detail (severity and all) stays
    under the detail size limit: long texts cut and marked, then as many as the budget holds."""
    total = 0
    longest = 0
    for name, value in attributes.items():
        size = _attribute_size(name, value)
        total += size
        longest = max(longest, size)
    if (
        len(attributes) <= MAX_LOG_ATTRIBUTES
        and total <= MAX_LOG_ATTRIBUTES_CHARS
        and longest <= MAX_LOG_ATTRIBUTE_CHARS
    ):
        return attributes  # the usual line: as it is, not copied
    kept: dict[str, Any] = {}
    budget = MAX_LOG_ATTRIBUTES_CHARS
    for name, value in attributes.items():
        if type(value) is str and len(value) > MAX_LOG_ATTRIBUTE_CHARS:
            cut = len(value) - MAX_LOG_ATTRIBUTE_CHARS
            if name == _STACKTRACE:  # the innermost frames are at its end
                value = f"[{cut} characters cut] ...{value[-MAX_LOG_ATTRIBUTE_CHARS:]}"
            else:
                value = f"{value[:MAX_LOG_ATTRIBUTE_CHARS]}... [{cut} more characters cut]"
        budget -= _attribute_size(name, value)
        if budget < 0 or len(kept) == MAX_LOG_ATTRIBUTES:
            break
        kept[name] = value
    if len(kept) < len(attributes):
        kept["_dropped_attributes"] = len(attributes) - len(kept)
    return kept


def _log_text(body: object) -> str:
    """The LOG row's message: the body as text, cut at MAX_LOG_MESSAGE_CHARS and marked."""
    text = body_text(body)
    if len(text) > MAX_LOG_MESSAGE_CHARS:
        cut = len(text) - MAX_LOG_MESSAGE_CHARS
        text = f"{text[:MAX_LOG_MESSAGE_CHARS]}... [{cut} more characters cut]"
    return clean_text(text)


def _attempt_number(value: object) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())  # int() strips less than str.strip(): "0\x1f" would raise
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _exception_text(attributes: Mapping[str, Any]) -> str:
    """``exception.type: exception.message`` of an exception event or log record."""
    kind = attributes.get("exception.type", "Exception")
    message = attributes.get("exception.message", "")
    kind = clean_text(kind)  # attribute values may be anything: text that never fails
    return f"{kind}: {clean_text(message)}" if message else kind


def _error_text(span: SpanFacts, logged: str | None = None) -> str | None:
    """A failed span's error text: its ``job.error``, else its newest ``exception`` event, else
    the newest exception log record in its context (``logged``), else its status message."""
    named = span.attributes.get(attr.JOB_ERROR)
    if named is not None and named != "":
        return clean_text(named)
    for event in reversed(span.events):
        if event.name == "exception" and event.attributes:
            return _exception_text(event.attributes)
    return logged or span.status_message or None


def is_exception_event(event_name: str | None) -> bool:
    """Whether a log record is an exception event: ``exception`` or ``<domain>.exception``
    (OTEL_SEMCONV_EXCEPTION_SIGNAL_OPT_IN=logs moves them from span events to log records)."""
    return event_name is not None and (
        event_name == "exception" or event_name.endswith(".exception")
    )


def _same(a: Any, b: Any) -> bool:
    """Equal, a NaN equal to a NaN at any depth: progress passed on and the newest one compared
    (a copy made by the writer process's pipe holds other float objects, and NaN != NaN)."""
    if a == b or (a != a and b != b):  # NaN is the only value unequal to itself
        return True
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(value, b[name]) for name, value in a.items())
    return False


def log_line(scope: Scope, key: str | None, record: LogFacts, logs_min: int) -> LogRecorded | None:
    """A log record (not a progress event) in ``scope``, within step ``key`` (None: between
    steps) -> its LOG command; None below ``logs_min``. Both doors' one way to a line."""
    number = record.severity_number
    text = record.severity_text
    if number == 0 and text:
        number = _named_severity(text.strip().upper())
    if number < logs_min:
        return None
    severity = clean_text(text, 32) if text else severity_name(number)
    return LogRecorded(
        scope,
        key,
        clamp_ns(record.time_ns),
        severity,
        _log_text(record.body),
        _log_attributes(record.attributes),
        record.trace_id,
        record.span_id,
    )


@dataclass(slots=True, eq=False)
class _OpenSpan:
    scope: Scope
    key: str | None  # the step key; None for the job span and for plain spans in its scope
    # The progress attributes last passed on while the step ran (None: none was).
    reported: Mapping[str, Any] | None = None
    # The step span a plain span lies in (0: none), and the time of the newest progress log
    # record passed on for a step (span events older than it do not replace it).
    step_id: int = 0
    progress_ns: int = 0
    # The newest exception log record in its context, as text: its failure text if it ends
    # failed without its own (collect keeps it in its state between requests).
    logged_error: str | None = None


class SpanTranslator:
    """Span facts in order -> recorder commands; the scope of each open span remembered.

    At most ``max_open_spans`` are kept (the oldest counted as ``evicted_spans``). With
    ``received=True`` a span seen ended without its start is started first; a live one is ignored.

    A job span's identity and limits are read once, from the first facts given of it with an
    identity (its start; its end when it had none then). Other values at its end are ignored
    and told to ``late`` (by default counted as the problem ``late_attributes``).
    """

    def __init__(
        self,
        *,
        problem: Problem,
        received: bool = True,
        max_open_spans: int = DEFAULT_MAX_OPEN_SPANS,
        logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
        late: Callable[[SpanFacts], None] | None = None,
    ) -> None:
        self._problem = problem
        self._late = self._count_late if late is None else late
        self._logs_min = logs_min_severity
        self._received = received
        self._max_open_spans = max_open_spans
        self._open: OrderedDict[int, _OpenSpan] = OrderedDict()  # oldest out in O(1)

    def open_spans(self) -> int:
        return len(self._open)

    def scoped(self, span_id: int) -> bool:
        """Whether the span is open here: in a job scope (or the job span itself)."""
        return span_id in self._open

    def held_spans(self) -> OrderedDict[int, _OpenSpan]:
        """The open spans by id, for a derivation state kept between requests (collect)."""
        return self._open

    def adopt_spans(self, held: OrderedDict[int, _OpenSpan]) -> None:
        """Continue from open spans a derivation state kept."""
        self._open = held

    def started(self, span: SpanFacts, *, seen: bool = False) -> list[Command]:
        """The commands a span's start implies (an ordinary-event span is complete at start);
        ``seen``: an invalid job span was counted at its start already."""
        span = self._in_range(span)
        attributes = span.attributes
        if attr.JOB_EVENT_TYPE in attributes:
            event = self._event(span, attributes)
            return [] if event is None else [event]
        span_id = span.span_id
        if span_id in self._open:
            return []
        if attr.JOB_ID in attributes:
            scope = self._job_scope(span, attributes, quiet=seen)
            if scope is not None:
                self._remember(span_id, _OpenSpan(scope, None))
                return [JobStarted(scope, span.start_ns, self._tags(attributes))]
        parent = self._open.get(span.parent_span_id) if span.parent_span_id else None
        if parent is None:
            return []  # outside any job scope
        scope = parent.scope
        key = attributes.get(attr.JOB_STEP_KEY)
        if key is None or attr.JOB_ID in attributes:  # an invalid job span is no step either
            # Not a step; its children are in the scope, and in the step it lies in if any.
            step_id = span.parent_span_id if parent.key is not None else parent.step_id
            self._remember(span_id, _OpenSpan(scope, None, step_id=step_id))
            return []
        key = _step_key(key)
        self._remember(span_id, _OpenSpan(scope, key))
        if attributes.get(STEP_SKIPPED) is True:
            return []  # skipped: its row is written whole at its end, no step opens
        return [StepStarted(scope, key, span_id, span.start_ns)]

    def progress(
        self, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> ProgressReported | None:
        """A live step's newest progress event (its attributes), seen while the step runs;
        nothing if a progress log record newer than its ``time_ns`` was passed on."""
        found = self._open.get(span_id)
        if found is None or found.key is None:
            return None
        if found.progress_ns:
            if time_ns < found.progress_ns:
                return None
            found.progress_ns = time_ns
        found.reported = attributes
        return ProgressReported(found.scope, found.key, attributes)

    def log(self, record: LogFacts) -> list[Command]:
        """The commands a log record implies: a step's progress, a log line, or nothing (its
        span is not open here: outside any job scope; below the minimum severity)."""
        found = self._open.get(record.span_id) if record.span_id else None
        if found is None:
            return []
        step = found if found.key is not None else None
        if step is None and found.step_id:
            step = self._open.get(found.step_id)
        if record.event_name == PROGRESS_EVENT:
            if step is None or step.key is None or record.time_ns < step.progress_ns:
                return []  # outside a step, or older than the snapshot passed on already
            attributes = record.attributes
            step.reported, step.progress_ns = attributes, record.time_ns
            return [ProgressReported(step.scope, step.key, attributes)]
        if is_exception_event(record.event_name):
            (found if step is None else step).logged_error = _exception_text(record.attributes)
        line = log_line(found.scope, None if step is None else step.key, record, self._logs_min)
        return [] if line is None else [line]

    def ended(self, span: SpanFacts) -> list[Command]:
        """The commands a span's end implies: a step's close, or the attempt's end."""
        if attr.JOB_EVENT_TYPE in span.attributes:
            return []  # an ordinary event is whole at its start: `started` recorded it
        # `started` saw every live span, and every received one it remembers
        span = self._in_range(span, start_counted=not self._received or span.span_id in self._open)
        span_id = span.span_id
        commands: list[Command] = []
        found = self._open.pop(span_id, None)
        if found is None:
            if not self._received and attr.JOB_ID not in span.attributes:
                return commands  # its start was outside a scope, dropped, or forgotten
            # A received span: its start is known only now. A live job span that named no
            # valid job as it started: read at its end, as collect reads it then.
            commands = self.started(span, seen=not self._received)
            found = self._open.pop(span_id, None)
            if found is None:
                return commands
        scope, key = found.scope, found.key
        if key is None and scope.span_id != span_id:
            return commands  # a plain span inside the job
        error = _error_text(span, found.logged_error) if span.error else None
        attributes = span.attributes
        end_ns = span.end_ns or span.start_ns
        if key is None:
            if not _same_job(scope, span, attributes) and (
                self._job_scope(span, attributes, quiet=True) != scope
            ):
                self._late(span)  # the values read at its start stand
            outcome = attributes.get(attr.JOB_OUTCOME)
            resource = _resource(attributes)
            commands.append(JobEnded(scope, end_ns, span.error, outcome, error, resource))
            return commands
        explicit = attributes.get(attr.JOB_STEP_DETAIL)
        if attributes.get(STEP_SKIPPED) is True:
            commands.append(StepSkipped(scope, key, span_id, span.start_ns, end_ns, explicit))
            return commands
        # The close takes the ended span's newest progress unless it was passed on already
        # (a poll's progress may have been shed while the writer was backlogged).
        newest = first_progress(reversed(span.events))
        latest = _NOTHING if newest is None else plain_attributes(newest.attributes)
        reported = found.reported
        if found.progress_ns and _event_ns(newest) < found.progress_ns:
            latest = _NOTHING  # a progress log record newer than the span's events was passed on
        if latest and (reported is None or not _same(latest, reported)):
            commands.append(ProgressReported(scope, key, latest))
        commands.append(StepEnded(scope, key, end_ns, span.error, explicit, error, span_id))
        return commands

    def whole(self, span: SpanFacts) -> list[Command]:
        """The commands of `started` then `ended` for a span whose start and end arrive with
        nothing in between (live: adjacent in the writer's queue); a step's as one StepRan."""
        span = self._in_range(span)
        attributes = span.attributes
        parent = self._open.get(span.parent_span_id) if span.parent_span_id else None
        if (
            parent is None
            or not is_step(attributes)
            or span.span_id in self._open
            or attributes.get(STEP_SKIPPED) is True
        ):
            return self.started(span) + self.ended(span)
        return [
            StepRan(
                parent.scope,
                _step_key(attributes[attr.JOB_STEP_KEY]),
                span.span_id,
                span.start_ns,
                span.end_ns or span.start_ns,
                span.error,
                attributes.get(attr.JOB_STEP_DETAIL),
                _error_text(span) if span.error else None,
                latest_progress(reversed(span.events)),
            )
        ]

    # -- interpretation -----------------------------------------------------------------------

    def _in_range(self, span: SpanFacts, *, start_counted: bool = False) -> SpanFacts:
        """``span`` with its times clamped into what every reader can hold (`times`); counted
        once per span (``start_counted``: `started` saw this start, counted it if it was off)."""
        start, end = span.start_ns, span.end_ns
        start_fits = EARLIEST_NS <= start <= LATEST_NS
        if start_fits and EARLIEST_NS <= end <= LATEST_NS:
            return span
        if start_fits or not start_counted:
            self._problem(
                "impossible_time",
                f"span {clean_text(span.name, 200)!r}: a time outside 1970..9999-12-30 clamped",
            )
        # An end clamped to 1970 reads as "not ended" (0): the translation takes the start then.
        return replace(span, start_ns=clamp_ns(start), end_ns=clamp_ns(end))

    def _count_late(self, span: SpanFacts) -> None:
        late_attributes(self._problem, span)

    def _remember(self, span_id: int, entry: _OpenSpan) -> None:
        spans = self._open
        spans[span_id] = entry
        if len(spans) > self._max_open_spans:
            spans.popitem(last=False)
            self._problem("evicted_spans", _evicted(self._max_open_spans))

    def _tags(self, attributes: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """The job span's ``job.tag.<name>`` attributes within the caps, by name."""
        prefix = attr.JOB_TAG_PREFIX
        found = [(name, value) for name, value in attributes.items() if name.startswith(prefix)]
        if not found:
            return ()  # most jobs: no tag
        named = sorted((clean_text(name[len(prefix) :]), value) for name, value in found)
        kept = [
            (name, clean_text(value, MAX_TAG_VALUE_CHARS))
            for name, value in named
            # a name holding a search separator (?tag=NAME:VALUE, --tag NAME=VALUE) is unsearchable
            if 0 < len(name) <= MAX_TAG_NAME_CHARS and ":" not in name and "=" not in name
        ]
        if len(kept) < len(named) or len(kept) > MAX_TAGS:
            self._problem(
                "dropped_tags",
                f"tags beyond {MAX_TAGS} per attempt, with a name of more than "
                f"{MAX_TAG_NAME_CHARS} characters or holding ':' or '=' dropped",
            )
        return tuple(kept[:MAX_TAGS])

    def _event(self, span: SpanFacts, attributes: Mapping[str, Any]) -> EventRecorded | None:
        """An ordinary event: in the parent's job scope, or in the scope its attributes name."""
        parent = self._open.get(span.parent_span_id) if span.parent_span_id else None
        scope = parent.scope if parent is not None else None
        if scope is None and attr.JOB_ID in attributes:
            scope = self._job_scope(span, attributes, event=True)
        if scope is None:
            return None
        message = attributes.get(attr.JOB_EVENT_MESSAGE)
        return EventRecorded(
            scope,
            clean_text(attributes[attr.JOB_EVENT_TYPE]),
            None if message is None else clean_text(message),
            parse_detail(attributes.get(attr.JOB_EVENT_DETAIL)),
            span.start_ns,
        )

    def _job_scope(
        self,
        span: SpanFacts,
        attributes: Mapping[str, Any],
        *,
        event: bool = False,
        quiet: bool = False,
    ) -> Scope | None:
        """The scope a job span (or an event naming its job) declares; None, counted as
        ``invalid_job_span`` unless ``quiet``, when it names none a row can hold."""
        domain = attributes.get(attr.JOB_DOMAIN)
        job_id = attributes.get(attr.JOB_ID)
        attempt = _attempt_number(attributes.get(attr.JOB_ATTEMPT))
        if (
            domain in (None, "")
            or job_id in (None, "")
            or attempt is None
            or not 1 <= attempt <= MAX_ATTEMPT
            or not id_fits(domain)
            or not id_fits(job_id)
        ):
            if quiet:
                return None
            self._problem(
                "invalid_job_span",
                f"span {clean_text(span.name, 200)!r} ignored: needs non-empty "
                f"{attr.JOB_DOMAIN} and {attr.JOB_ID} (<= {MAX_ID_CHARS} characters and "
                f"{MAX_ID_BYTES} bytes) and an integer {attr.JOB_ATTEMPT} in 1..{MAX_ATTEMPT}",
            )
            return None
        job_type = attributes.get(attr.JOB_TYPE)
        execution = attributes.get(attr.JOB_EXECUTION)
        deadline = None if event else _deadline(span.start_ns, attributes.get(attr.JOB_TIME_LIMIT))
        # An event names its scope; it does not own an execution of the attempt.
        trace_id, span_id = (0, 0) if event else (span.trace_id, span.span_id)
        return Scope(
            clean_text(domain),
            clean_text(job_id),
            None if job_type is None else job_type_text(job_type),
            attempt,
            None if execution is None else clean_text(execution, MAX_ID_CHARS),
            trace_id,
            span_id,
            deadline,
        )


_IDENTITY = frozenset(
    (attr.JOB_DOMAIN, attr.JOB_ID, attr.JOB_ATTEMPT, attr.JOB_TYPE, attr.JOB_EXECUTION,
     attr.JOB_TIME_LIMIT)
)  # fmt: skip


def is_step(attributes: Mapping[str, Any]) -> bool:
    """Whether a span in a job scope is a step: it names a step key, and neither a job nor an
    event (the one test of the translation, and of the processor's polls)."""
    return (
        attr.JOB_STEP_KEY in attributes
        and attr.JOB_ID not in attributes
        and attr.JOB_EVENT_TYPE not in attributes
    )


def is_job_identity(name: str) -> bool:
    """Whether a job span's attribute is read at its start: its job's identity, limits, tags."""
    return name in _IDENTITY or name.startswith(attr.JOB_TAG_PREFIX)


def late_attributes(problem: Problem, span: SpanFacts) -> None:
    """Count a job span whose job attributes changed after they were read (both doors)."""
    problem(
        "late_attributes",
        f"job span {clean_text(span.name, 200)!r}: job attributes changed after its start "
        "ignored (the values it started with stand)",
    )


@cache
def _evicted(max_open_spans: int) -> str:
    """The problem's text, built once per bound: not per eviction, nor per translation (collect
    makes one per trace of every job it derives)."""
    return f"more than {max_open_spans} open spans"


def _event_ns(event: EventLike | None) -> int:
    """An event's time (the SDK's ``timestamp``, the facts' ``time_ns``); 0 if unknown."""
    time_ns = getattr(event, "timestamp", None) or getattr(event, "time_ns", 0)
    return time_ns if type(time_ns) is int else 0


def _step_key(value: object) -> str:
    """``job.step.key`` as text (the recorder cleans and cuts it; a str passes untouched)."""
    return value if type(value) is str else clean_text(value)


def _deadline(start_ns: int, limit: object) -> int | None:
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and 0 < limit < 1e9:
        return start_ns + int(limit * 1e9)
    return None


def _resource(attributes: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The job span's resource values a door passed (`RESOURCE_ATTRIBUTES`), clean and cut."""
    return tuple(map(_resource_text, map(attributes.get, RESOURCE_ATTRIBUTES)))


def _resource_text(value: object) -> str | None:
    return clean_text(value, MAX_RESOURCE_CHARS) if isinstance(value, str) else None


def _same_job(scope: Scope, span: SpanFacts, attributes: Mapping[str, Any]) -> bool:
    """Whether a job span's end names, value for value, the job ``scope`` read at its start (the
    usual end: then `_job_scope` would read the same scope again; if not, it is asked)."""
    get = attributes.get
    return (
        span.span_id == scope.span_id
        and span.trace_id == scope.trace_id
        and get(attr.JOB_DOMAIN) == scope.domain
        and get(attr.JOB_ID) == scope.job_id
        and _attempt_number(get(attr.JOB_ATTEMPT)) == scope.attempt
        and get(attr.JOB_TYPE) == scope.job_type
        and get(attr.JOB_EXECUTION) == scope.execution
        and _deadline(span.start_ns, get(attr.JOB_TIME_LIMIT)) == scope.deadline_ns
    )
