"""JobStepsProcessor: door one. The job thread records facts; the writer thread interprets them.

The SDK calls the hooks synchronously and does not catch what they raise. So a hook only asks
"is this span in a job scope?" (a dict lookup), and if so appends the SDK's own span object to
the writer's queue, as BatchSpanProcessor does. On the writer thread `translate` turns the span
into the recorder's commands, the same translation the OTLP receiver uses.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .attributes import JOB_EVENT_TYPE, JOB_ID
from .batch import Batch
from .db import check_dsn
from .detail import DEFAULT_MAX_DETAIL_BYTES
from .errors import ConfigurationError
from .facts import ended_facts, started_facts
from .recorder import Command, StepRecorder, StepStarted
from .schema import check_writable_tables, migrate
from .spans import attribute_dict, events_added, newest_progress_event, plain_attributes
from .stats import Stats
from .store import StepStore
from .telemetry import register_metrics
from .translate import DEFAULT_MAX_OPEN_SPANS, SpanTranslator
from .writer import RowStore, Writer

__all__ = ["JobStepsProcessor"]

# Queue items are built with tuple.__new__: 0.08 instead of 0.25 us a NamedTuple call costs on
# the job's thread (benchmarks/hot_path.py); tests/unit/test_processor.py checks their arity.
_new = tuple.__new__

# A running step's events are looked at this often: the first progress is written this soon.
PROGRESS_POLL_S = 0.05
MIN_PROGRESS_POLL_S = 0.005  # with no debounce at all


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None


class SpanStarted(NamedTuple):
    """Queued by on_start: a span in a job scope (or one that may open a scope) started."""

    span: Span


class SpanEnded(NamedTuple):
    """Queued by on_end: a span that was queued at its start has ended."""

    span: ReadableSpan


class _WatchedStep:
    """A live step span the writer polls for new events while it runs."""

    __slots__ = ("added", "newest", "span")

    def __init__(self, span: ReadableSpan) -> None:
        self.span = span
        self.added = 0  # events_added() when last polled
        self.newest: object = None  # the progress event last reported


class _LiveSpans:
    """The writer's handler for door one: queued live spans -> facts -> commands -> recorder.

    Progress needs no hook in the job: while a step runs, the writer polls its span's event
    count every ``poll_interval_s`` (and at every flush and at its end) and reports the newest
    progress event when it changed. The job's ``add_event`` stays the SDK's own.
    """

    def __init__(
        self,
        recorder: StepRecorder,
        translator: SpanTranslator,
        *,
        poll_interval_s: float,
        clock: Callable[[], float],
        count: Callable[[str, int], None],
        problem: Callable[[str, object], None],
        max_steps: int,
    ) -> None:
        self.recorder = recorder
        self.translator = translator
        self._record = recorder.handle
        self._poll_interval = poll_interval_s
        self._clock = clock
        self._count = count
        self._problem = problem
        self._steps: dict[int, _WatchedStep] = {}
        self._max_steps = max_steps
        self._next_poll = 0.0
        self._deferred: ReadableSpan | None = None  # a start that waits one item for its end
        self.backlogged: Callable[[], bool] = lambda: False  # the writer's, once it exists

    def handle(self, item: SpanStarted | SpanEnded) -> None:
        deferred = self._deferred
        if deferred is not None:
            self._deferred = None
            if type(item) is SpanEnded and item.span.context is deferred.context:
                self._record_all(self.translator.whole(ended_facts(item.span)))
                return
            try:
                self._start(deferred)
            except Exception as error:  # noqa: BLE001 - it must not take this item down with it
                self._problem("internal_error", error)
        if type(item) is SpanEnded:
            self._end(item.span)
        elif item.span.end_time is not None:
            # Ended already: its end is most likely the next item, and the two are read as one.
            self._deferred = item.span
        else:
            self._start(item.span)

    def _settle(self) -> None:
        """Apply a start held back to meet its end: whatever comes next must see it."""
        deferred = self._deferred
        if deferred is not None:
            self._deferred = None
            self._start(deferred)

    def _record_all(self, commands: list[Command]) -> None:
        for command in commands:
            self._record(command)

    def _start(self, span: ReadableSpan) -> None:
        for command in self.translator.started(started_facts(span)):
            self._record(command)
            if type(command) is StepStarted:
                steps = self._steps
                if not steps:
                    self._next_poll = self._clock() + self._poll_interval
                steps[command.span_id] = _WatchedStep(span)
                if len(steps) > self._max_steps:  # the translation forgot it too
                    del steps[next(iter(steps))]

    def _end(self, span: ReadableSpan) -> None:
        watched = self._steps.pop(span.context.span_id, None)
        if watched is not None and watched.newest is not None:
            # Polled before: events since then ride with the close. Never polled: the
            # translation takes the newest progress from the ended span's events.
            self._poll(watched, span)
        self._record_all(self.translator.ended(ended_facts(span)))

    def _poll(self, watched: _WatchedStep, span: ReadableSpan) -> None:
        added = events_added(span)
        if added == watched.added:
            return
        watched.added = added
        event = newest_progress_event(span)
        if event is None or event is watched.newest:
            return  # only exceptions were added
        watched.newest = event
        progress = self.translator.progress(
            span.context.span_id, plain_attributes(event.attributes)
        )
        if progress is not None:
            self._count("commands", 1)
            self._record(progress)

    def _poll_all(self) -> None:
        if self.backlogged():
            # The database is away and the held operations are at their bound: progress is
            # the first thing shed (the close still takes the step's newest detail).
            self._problem("dropped_ProgressReported", "backlog: progress not read")
            return
        for watched in list(self._steps.values()):
            self._poll(watched, watched.span)

    def next_due(self) -> float | None:
        due = self.recorder.next_due()
        if self._steps and (due is None or self._next_poll < due):
            return self._next_poll
        return due

    def fire_due(self, now: float | None = None) -> None:
        self._settle()
        now = self._clock() if now is None else now
        if self._steps and now >= self._next_poll:
            # A poll costs about a microsecond per running step: with very many, look less often.
            self._next_poll = now + max(self._poll_interval, len(self._steps) * 5e-6)
            self._poll_all()
        self.recorder.fire_due(now)

    def flush_timers(self) -> None:
        """A flush: every progress added before it is read now, and every window written."""
        self._settle()
        self._poll_all()
        self.recorder.flush_timers()

    # The rest of what the writer needs is the recorder's.

    def take_batch(self) -> Batch | None:
        self._settle()
        return self.recorder.take_batch()

    def pending_operations(self) -> int:
        return self.recorder.pending_operations()

    def open_steps(self) -> list[tuple[str, str, int, str]]:
        self._settle()
        return self.recorder.open_steps()


class JobStepsProcessor(SpanProcessor):
    """Records job attempts and their steps from spans into PostgreSQL.

    Add it to a TracerProvider. Spans outside a job scope cost a dictionary lookup and nothing
    else; inside one, each hook appends a command to an in-memory queue that one background
    thread writes in batches. Database problems are counted (see `stats`), logged at most once
    a minute per kind, and never raised into the job.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        debounce_ms: float | None = None,
        max_queue_size: int | None = None,
        shutdown_timeout_ms: int | None = None,
        connect_timeout_s: float = 5.0,
        statement_timeout_ms: int = 30_000,
        heartbeat_interval_s: float = 30.0,
        max_detail_bytes: int = DEFAULT_MAX_DETAIL_BYTES,
        max_open_spans: int | None = None,
        auto_migrate: bool = False,
        store: RowStore | None = None,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        dsn = dsn or os.environ.get("OTEL_JOBSTEPS_DSN")
        if store is None and not dsn:
            raise ConfigurationError("no database: pass dsn= or set OTEL_JOBSTEPS_DSN")
        self._schema = schema or os.environ.get("OTEL_JOBSTEPS_SCHEMA") or "public"
        self._debounce_ms = (
            debounce_ms if debounce_ms is not None else _env_int("OTEL_JOBSTEPS_DEBOUNCE_MS", 1000)
        )
        queue_size = (
            max_queue_size
            if max_queue_size is not None
            else _env_int("OTEL_JOBSTEPS_MAX_QUEUE_SIZE", 50_000)
        )
        shutdown_ms = (
            shutdown_timeout_ms
            if shutdown_timeout_ms is not None
            else _env_int("OTEL_JOBSTEPS_SHUTDOWN_TIMEOUT_MS", 5000)
        )
        self._max_open_spans = (
            max_open_spans
            if max_open_spans is not None
            else _env_int("OTEL_JOBSTEPS_MAX_OPEN_SPANS", DEFAULT_MAX_OPEN_SPANS)
        )
        for name, value in (
            ("debounce_ms", self._debounce_ms),
            ("max_queue_size", queue_size),
            ("shutdown_timeout_ms", shutdown_ms),
            ("connect_timeout_s", connect_timeout_s),
            ("statement_timeout_ms", statement_timeout_ms),
            ("heartbeat_interval_s", heartbeat_interval_s),
            ("max_detail_bytes", max_detail_bytes),
            ("max_open_spans", self._max_open_spans),
        ):
            if value < 0 or (value == 0 and name != "debounce_ms"):
                raise ConfigurationError(f"{name} must be positive, got {value!r}")
        self._shutdown_timeout_s = shutdown_ms / 1000.0
        self._auto_migrate = auto_migrate
        self._clock = clock
        self._stats = Stats()
        self._store = store or StepStore(
            check_dsn(dsn or ""),
            schema=self._schema,
            connect_timeout_s=connect_timeout_s,
            statement_timeout_ms=statement_timeout_ms,
            max_detail_bytes=max_detail_bytes,
            on_connect=self._prepare_connection,
        )
        self._live = self._live_spans()
        self._writer = writer = Writer(
            self._live,
            self._store,
            self._stats,
            max_queue_size=queue_size,
            # Unwritten row operations held while the database is away: same order of memory.
            max_pending_operations=2 * queue_size,
            heartbeat_interval_s=heartbeat_interval_s,
            clock=clock,
        )
        self._live.backlogged = writer.backlogged
        self._submit = writer.submit
        # Span id -> True for every queued span not yet ended (job thread; bounded, oldest out).
        self._in_scope: dict[int, bool] = {}
        self._shut_down = False
        child_hook = weakref.WeakMethod(self._after_fork_in_child)
        os.register_at_fork(after_in_child=lambda: (hook := child_hook()) and hook())
        register_metrics(self, meter_provider)

    # -- span hooks (application threads) -----------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            attributes = attribute_dict(span)
            parent = span.parent
            in_scope = self._in_scope
            if not (
                (parent is not None and parent.span_id in in_scope)
                or JOB_ID in attributes
                or JOB_EVENT_TYPE in attributes
            ):
                return  # outside any job scope: nothing else happens, ever
            if JOB_EVENT_TYPE not in attributes:  # an event is whole at its start
                span_id = span.context.span_id
                in_scope[span_id] = True
                if len(in_scope) > self._max_open_spans:
                    # The translation forgets (and counts) the same oldest span.
                    del in_scope[next(iter(in_scope))]
            self._submit(_new(SpanStarted, (span,)))
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            if self._in_scope.pop(span.context.span_id, False):
                self._submit(_new(SpanEnded, (span,)))
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    # -- SpanProcessor lifecycle --------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """True once everything recorded before the call is in the database (trailing progress
        included); False if ``timeout_millis`` passed first."""
        return self._writer.flush(timeout_millis / 1000.0)

    def shutdown(self) -> None:
        """Write what is queued, within the shutdown timeout, and stop; safe to call twice."""
        if self._shut_down:
            return
        self._shut_down = True
        self._writer.shutdown(self._shutdown_timeout_s)

    def stats(self) -> dict[str, Any]:
        """Counters: commands handled, operations written, retries, drops by kind, last error."""
        data = self._stats.snapshot()
        data["queued"] = self._writer.queue_length()
        data["open_attempts"] = self._live.recorder.open_attempts()
        data["open_spans"] = self._live.translator.open_spans()
        return data

    # -- internals ----------------------------------------------------------------------------

    def _live_spans(self) -> _LiveSpans:
        recorder = StepRecorder(
            debounce_ms=self._debounce_ms,
            clock=self._clock,
            on_evict=lambda scope: self._stats.problem(
                "evicted_attempts", "a job span never ended: its attempt is forgotten"
            ),
        )
        translator = SpanTranslator(
            problem=self._stats.problem, received=False, max_open_spans=self._max_open_spans
        )
        return _LiveSpans(
            recorder,
            translator,
            poll_interval_s=min(PROGRESS_POLL_S, self._debounce_ms / 1000) or MIN_PROGRESS_POLL_S,
            clock=self._clock,
            count=self._stats.add,
            problem=self._stats.problem,
            max_steps=self._max_open_spans,
        )

    def _prepare_connection(self, conn: Any) -> None:
        if self._auto_migrate:
            migrate(conn, schema=self._schema)
        else:
            check_writable_tables(conn, schema=self._schema)

    def _after_fork_in_child(self) -> None:
        """The child starts with nothing of the parent's: its open spans belong to the parent."""
        self._stats.reset()
        self._in_scope = {}
        self._live = self._live_spans()
        self._live.backlogged = self._writer.backlogged
        self._writer.after_fork_in_child(self._live)
