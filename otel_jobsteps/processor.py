"""JobStepsProcessor: span hooks become recorder commands on the caller's thread, with no I/O.

The SDK calls these hooks synchronously and does not catch what they raise, so each hook only
reads attributes, keeps a span-id -> scope map, and appends one command to the writer's queue.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import StatusCode
from psycopg.conninfo import conninfo_to_dict

from .attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EVENT_DETAIL,
    JOB_EVENT_MESSAGE,
    JOB_EVENT_TYPE,
    JOB_EXECUTION,
    JOB_ID,
    JOB_OUTCOME,
    JOB_STEP_DETAIL,
    JOB_STEP_KEY,
    JOB_TIME_LIMIT,
    JOB_TYPE,
)
from .detail import DEFAULT_MAX_DETAIL_BYTES, clean_text, parse_detail
from .errors import ConfigurationError
from .recorder import (
    EventRecorded,
    JobEnded,
    JobStarted,
    ProgressReported,
    Scope,
    StepEnded,
    StepRecorder,
    StepStarted,
)
from .schema import check_writable_tables, migrate
from .stats import Stats
from .store import StepStore
from .telemetry import register_metrics
from .writer import Writer

__all__ = ["JobStepsProcessor"]

MAX_ID_CHARS = 512
MAX_ATTEMPT = 2**31 - 1  # the attempt column is a PostgreSQL integer


class _ProgressEvents(BoundedList):  # type: ignore[type-arg]
    """A step span's event list that also reports each event as it is added.

    OpenTelemetry has no event hook for processors; this replaces the SDK span's private
    event list at start so progress reaches the recorder while the step runs.
    """

    def __init__(self, maxlen: int | None, notify: Callable[[Event], None]) -> None:
        super().__init__(maxlen)
        self._notify = notify

    def append(self, item: Event) -> None:
        super().append(item)
        if item.name != "exception":
            self._notify(item)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None


def _attempt_number(value: object) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _error_text(span: ReadableSpan) -> str | None:
    for event in reversed(span.events):
        if event.name == "exception" and event.attributes:
            kind = event.attributes.get("exception.type", "Exception")
            message = event.attributes.get("exception.message", "")
            return f"{kind}: {message}" if message else str(kind)
    return span.status.description or None


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
        auto_migrate: bool = False,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        dsn = dsn or os.environ.get("OTEL_JOBSTEPS_DSN")
        if not dsn:
            raise ConfigurationError("no database: pass dsn= or set OTEL_JOBSTEPS_DSN")
        try:
            conninfo_to_dict(dsn)
        except Exception:  # noqa: BLE001 - the message would echo the password
            raise ConfigurationError("dsn is not a valid PostgreSQL connection string") from None
        self._schema = schema or os.environ.get("OTEL_JOBSTEPS_SCHEMA") or "public"
        self._debounce_ms = (
            debounce_ms if debounce_ms is not None else _env_int("OTEL_JOBSTEPS_DEBOUNCE_MS", 1000)
        )
        queue_size = max_queue_size or _env_int("OTEL_JOBSTEPS_MAX_QUEUE_SIZE", 100_000)
        shutdown_ms = shutdown_timeout_ms or _env_int("OTEL_JOBSTEPS_SHUTDOWN_TIMEOUT_MS", 5000)
        for name, value in (
            ("debounce_ms", self._debounce_ms),
            ("max_queue_size", queue_size),
            ("shutdown_timeout_ms", shutdown_ms),
            ("connect_timeout_s", connect_timeout_s),
            ("statement_timeout_ms", statement_timeout_ms),
            ("heartbeat_interval_s", heartbeat_interval_s),
            ("max_detail_bytes", max_detail_bytes),
        ):
            if value < 0 or (value == 0 and name != "debounce_ms"):
                raise ConfigurationError(f"{name} must be positive, got {value!r}")
        self._shutdown_timeout_s = shutdown_ms / 1000.0
        self._auto_migrate = auto_migrate
        self._clock = clock
        self._stats = Stats()
        self._store = StepStore(
            dsn,
            schema=self._schema,
            connect_timeout_s=connect_timeout_s,
            statement_timeout_ms=statement_timeout_ms,
            max_detail_bytes=max_detail_bytes,
            on_connect=self._prepare_connection,
        )
        self._recorder = StepRecorder(debounce_ms=self._debounce_ms, clock=clock)
        self._writer = Writer(
            self._recorder,
            self._store,
            self._stats,
            max_queue_size=queue_size,
            heartbeat_interval_s=heartbeat_interval_s,
            clock=clock,
        )
        self._scopes: dict[int, Scope] = {}
        self._step_keys: dict[int, str] = {}
        self._shut_down = False
        child_hook = weakref.WeakMethod(self._after_fork_in_child)
        os.register_at_fork(after_in_child=lambda: (hook := child_hook()) and hook())
        register_metrics(self, meter_provider)

    # -- span hooks (application threads) -----------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            self._start(span)
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            self._end(span)
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    def _start(self, span: Span) -> None:
        attributes = span.attributes
        if attributes and JOB_EVENT_TYPE in attributes:
            self._record_event(span, attributes)
            return
        if attributes and JOB_ID in attributes:
            scope = self._job_scope(span, attributes)
            if scope is not None:
                self._scopes[scope.span_id] = scope
                self._writer.submit(JobStarted(scope, span.start_time or time.time_ns()))
                return
        parent = span.parent
        if parent is None:
            return
        scope = self._scopes.get(parent.span_id)
        if scope is None:
            return
        span_id = span.context.span_id
        self._scopes[span_id] = scope
        key = attributes.get(JOB_STEP_KEY) if attributes else None
        if key is None:
            return
        key = key if type(key) is str else str(key)
        self._step_keys[span_id] = key
        self._hook_events(span, partial(self._on_progress, scope, key))
        self._writer.submit(StepStarted(scope, key, span_id, span.start_time or time.time_ns()))

    def _end(self, span: ReadableSpan) -> None:
        span_id = span.context.span_id
        scope = self._scopes.pop(span_id, None)
        if scope is None:
            return
        failed = span.status.status_code is StatusCode.ERROR
        end_ns = span.end_time or time.time_ns()
        attributes = span.attributes
        if scope.span_id == span_id:
            outcome = attributes.get(JOB_OUTCOME) if attributes else None
            error = _error_text(span) if failed else None
            self._writer.submit(JobEnded(scope, end_ns, failed, outcome, error))
            return
        key = self._step_keys.pop(span_id, None)
        if key is None:
            return
        explicit = attributes.get(JOB_STEP_DETAIL) if attributes else None
        error = _error_text(span) if failed else None
        self._writer.submit(StepEnded(scope, key, end_ns, failed, explicit, error))

    def _record_event(self, span: Span, attributes: Mapping[str, Any]) -> None:
        """An ordinary event: in the parent's job scope, or in the scope its attributes name."""
        parent = span.parent
        scope = self._scopes.get(parent.span_id) if parent is not None else None
        if scope is None and JOB_ID in attributes:
            scope = self._job_scope(span, attributes, event=True)
        if scope is None:
            return
        message = attributes.get(JOB_EVENT_MESSAGE)
        self._writer.submit(
            EventRecorded(
                scope,
                str(attributes[JOB_EVENT_TYPE]),
                None if message is None else str(message),
                parse_detail(attributes.get(JOB_EVENT_DETAIL)),
                span.start_time or time.time_ns(),
            )
        )

    def _on_progress(self, scope: Scope, key: str, event: Event) -> None:
        try:
            self._writer.submit_progress(ProgressReported(scope, key, event.attributes or {}))
        except Exception as error:  # noqa: BLE001 - called from span.add_event in the job
            self._stats.problem("internal_error", error)

    def _hook_events(self, span: Span, notify: Callable[[Event], None]) -> None:
        events = getattr(span, "_events", None)
        if type(events) is BoundedList:
            hooked = _ProgressEvents(events._dq.maxlen, notify)  # type: ignore[attr-defined]
            hooked.extend(events)
            span._events = hooked
        else:
            self._stats.problem("progress_hook_unavailable", "this SDK's span has no event list")

    def _job_scope(
        self, span: Span, attributes: Mapping[str, Any], *, event: bool = False
    ) -> Scope | None:
        domain = attributes.get(JOB_DOMAIN)
        job_id = attributes.get(JOB_ID)
        attempt = _attempt_number(attributes.get(JOB_ATTEMPT))
        if (
            domain in (None, "")
            or job_id in (None, "")
            or attempt is None
            or not 1 <= attempt <= MAX_ATTEMPT
            or len(str(domain)) > MAX_ID_CHARS
            or len(str(job_id)) > MAX_ID_CHARS
        ):
            self._stats.problem(
                "invalid_job_span",
                f"span {span.name!r} ignored: needs non-empty {JOB_DOMAIN} and {JOB_ID} "
                f"(<= {MAX_ID_CHARS} characters) and an integer {JOB_ATTEMPT} in 1..{MAX_ATTEMPT}",
            )
            return None
        job_type = attributes.get(JOB_TYPE)
        execution = attributes.get(JOB_EXECUTION)
        deadline = None if event else self._deadline(span, attributes.get(JOB_TIME_LIMIT))
        # An event names its scope; it does not own an execution of the attempt.
        trace_id, span_id = (0, 0) if event else (span.context.trace_id, span.context.span_id)
        return Scope(
            clean_text(domain),
            clean_text(job_id),
            None if job_type is None else clean_text(job_type, MAX_ID_CHARS),
            attempt,
            None if execution is None else clean_text(execution, MAX_ID_CHARS),
            trace_id,
            span_id,
            deadline,
        )

    @staticmethod
    def _deadline(span: Span, limit: object) -> int | None:
        if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
            return (span.start_time or time.time_ns()) + int(limit * 1e9)
        return None

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
        data["open_attempts"] = self._recorder.open_attempts()
        return data

    # -- internals ----------------------------------------------------------------------------

    def _prepare_connection(self, conn: Any) -> None:
        if self._auto_migrate:
            migrate(conn, schema=self._schema)
        else:
            check_writable_tables(conn, schema=self._schema)

    def _after_fork_in_child(self) -> None:
        self._stats.reset()
        self._recorder = StepRecorder(debounce_ms=self._debounce_ms, clock=self._clock)
        self._writer.after_fork_in_child(self._recorder)
