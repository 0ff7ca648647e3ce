"""JobStepsProcessor: span hooks become recorder commands on the caller's thread, with no I/O.

The SDK calls these hooks synchronously and does not catch what they raise, so each hook only
reads attributes, keeps a span-id -> scope map, and appends one command to the writer's queue.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
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
from .spans import LatestProgress, attribute_dict, latest_progress, watch_events
from .stats import Stats
from .store import StepStore
from .telemetry import register_metrics
from .writer import Writer

__all__ = ["JobStepsProcessor"]

# Commands are built with tuple.__new__: a third of a NamedTuple call on the hot path.
_new = tuple.__new__
MAX_ID_CHARS = 512
MAX_ATTEMPT = 2**31 - 1  # the attempt column is a PostgreSQL integer


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
        queue_size = (
            max_queue_size
            if max_queue_size is not None
            else _env_int("OTEL_JOBSTEPS_MAX_QUEUE_SIZE", 100_000)
        )
        shutdown_ms = (
            shutdown_timeout_ms
            if shutdown_timeout_ms is not None
            else _env_int("OTEL_JOBSTEPS_SHUTDOWN_TIMEOUT_MS", 5000)
        )
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
            # Unwritten row operations held while the database is away: same order of memory.
            max_pending_operations=2 * queue_size,
            heartbeat_interval_s=heartbeat_interval_s,
            clock=clock,
        )
        # Every span inside a job scope, by span id: its scope and, for a step, its key.
        self._spans: dict[int, tuple[Scope, str | None]] = {}
        # Step spans whose events could not be watched (an SDK unlike this one): read at end.
        self._unwatched: set[int] = set()
        self._shut_down = False
        child_hook = weakref.WeakMethod(self._after_fork_in_child)
        os.register_at_fork(after_in_child=lambda: (hook := child_hook()) and hook())
        register_metrics(self, meter_provider)

    # -- span hooks (application threads) -----------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            attributes = attribute_dict(span)
            if attributes:
                if JOB_EVENT_TYPE in attributes:
                    self._record_event(span, attributes)
                    return
                if JOB_ID in attributes and self._start_job(span, attributes):
                    return
            parent = span.parent
            if parent is None:
                return
            spans = self._spans
            found = spans.get(parent.span_id)
            if found is None:
                return  # outside any job scope: nothing else happens, ever
            scope = found[0]
            key = attributes.get(JOB_STEP_KEY)
            span_id = span.context.span_id
            if key is None:
                spans[span_id] = (scope, None)  # not a step, but its children are in scope
                return
            key = key if type(key) is str else str(key)
            spans[span_id] = step = (scope, key)
            if not watch_events(span, self._report_progress, step):
                self._unwatched.add(span_id)
                self._stats.problem("progress_hook_unavailable", "progress is read at step end")
            self._writer.submit(_new(StepStarted, (scope, key, span_id, span.start_time)))
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            span_id = span.context.span_id
            found = self._spans.pop(span_id, None)
            if found is None:
                return
            scope, key = found
            if key is None and scope.span_id != span_id:
                return
            failed = span.status.status_code is StatusCode.ERROR
            error = _error_text(span) if failed else None
            attributes = attribute_dict(span)
            end_ns = span.end_time or time.time_ns()
            if key is None:
                outcome = attributes.get(JOB_OUTCOME)
                self._writer.submit(_new(JobEnded, (scope, end_ns, failed, outcome, error)))
                return
            if self._unwatched and span_id in self._unwatched:
                self._unwatched.discard(span_id)
                latest = latest_progress(reversed(span.events))
                if latest:
                    self._report_progress((scope, key), lambda: latest)
            explicit = attributes.get(JOB_STEP_DETAIL)
            self._writer.submit(_new(StepEnded, (scope, key, end_ns, failed, explicit, error)))
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    def _start_job(self, span: Span, attributes: Mapping[str, Any]) -> bool:
        scope = self._job_scope(span, attributes)
        if scope is None:
            return False
        self._spans[scope.span_id] = (scope, None)
        self._writer.submit(_new(JobStarted, (scope, span.start_time)))
        return True

    def _record_event(self, span: Span, attributes: Mapping[str, Any]) -> None:
        """An ordinary event: in the parent's job scope, or in the scope its attributes name."""
        parent = span.parent
        found = self._spans.get(parent.span_id) if parent is not None else None
        scope = found[0] if found is not None else None
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

    def _report_progress(self, step: tuple[Scope, str], latest: LatestProgress) -> None:
        try:
            self._writer.submit_progress(_new(ProgressReported, (*step, latest)))
        except Exception as error:  # noqa: BLE001 - called from span.add_event in the job
            self._stats.problem("internal_error", error)

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
