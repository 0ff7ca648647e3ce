"""JobStepsProcessor: door one, span and log record hooks in the job's own process.

A hook only asks "is this span in a job scope?" (a dict lookup) and, if so, queues an item;
the writer side reads the queue (`_live.writer_side`): facts, translation, recorder, store.
"""

from __future__ import annotations

import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk._logs import LogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ._core.detail import DEFAULT_MAX_DETAIL_BYTES
from ._core.dialects import select_dialects
from ._core.translate import PROGRESS_EVENT, is_exception_event
from ._live.fields import OTLP_KIND, otlp_kind
from ._live.settings import Settings
from ._live.spans import SPAN_ID, attribute_dict
from ._live.watch import LogEmitted, SpanEnded, SpanStarted, ended_fields
from ._live.writer import RowStore
from ._live.writer_side import WriterSide, build_writer_side
from ._telemetry.counters import register_metrics
from ._telemetry.log import is_own_logger, logger
from ._telemetry.metrics import StepMetrics
from ._telemetry.stats import Stats
from .attributes import JOB_EVENT_TYPE, JOB_ID

__all__ = ["JobStepsProcessor"]

# Queue items are built without their constructor: 0.08 instead of 0.25 us a NamedTuple call
# costs on the job's thread (benchmarks/hot_path.py); tests/unit/test_processor.py checks them.
_new = tuple.__new__
_new_started = object.__new__
# Spans that named nothing at their start kept to be asked again at their first child's start:
# a DBOS workflow's first child starts at once; those past the bound are not asked.
MAX_BARE_SPANS = 256


class JobStepsProcessor(SpanProcessor, LogRecordProcessor):
    """Records job attempts and their steps from spans (and log records) into PostgreSQL.

    Spans outside a job scope cost a dict lookup; inside one, each hook queues an item for one
    background writer. Database problems are counted (`stats`), logged at most once a minute
    per kind, never raised into the job. ``writer_side`` (tests): what the hooks write through.
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
        writer: str | None = None,
        meter_provider: MeterProvider | None = None,
        max_step_keys: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        logs_min_severity: str | int | None = None,
        logs_max_per_step: int | None = None,
        writer_side: WriterSide | None = None,
        dialects: str | Sequence[str] | None = None,
    ) -> None:
        settings = self._settings = Settings.from_environment(
            has_store=store is not None or writer_side is not None,
            dsn=dsn,
            schema=schema,
            writer=writer,
            debounce_ms=debounce_ms,
            max_queue_size=max_queue_size,
            shutdown_timeout_ms=shutdown_timeout_ms,
            connect_timeout_s=connect_timeout_s,
            statement_timeout_ms=statement_timeout_ms,
            heartbeat_interval_s=heartbeat_interval_s,
            max_detail_bytes=max_detail_bytes,
            max_open_spans=max_open_spans,
            auto_migrate=auto_migrate,
            logs_min_severity=logs_min_severity,
            logs_max_per_step=logs_max_per_step,
            dialects=dialects,
        )
        # Other instrumentations' job spans (`_core.dialects`); None: no test per span.
        self._dialects = select_dialects(settings.dialects) or None
        # The SDK kinds of the parents a late-claiming dialect may claim (`_claims_parent`):
        # compared by identity, cheaper than hashing the enum.
        late = frozenset() if self._dialects is None else self._dialects.late_kinds
        self._late_kinds = tuple(kind for kind, number in OTLP_KIND.items() if number in late)
        # The latest spans of those kinds outside any job that had no attribute at their start:
        # at its first child's start, such a span is asked again (`_claims_parent`).
        self._bare: OrderedDict[int, Span] = OrderedDict()
        self._stats = stats = Stats() if writer_side is None else writer_side.counters
        # Metrics of what the writer committed (max_step_keys: distinct keys per job type).
        step_metrics = StepMetrics(
            meter_provider,
            max_step_keys=max_step_keys,
            on_folded=partial(stats.add, "metrics_step_keys_folded"),
            on_folded_values=partial(stats.add, "metrics_values_folded"),
        )
        self._side = writer_side or build_writer_side(
            settings, stats, store=store, clock=clock, on_committed=step_metrics.record
        )
        self._submit, self._queued = self._side.submit, self._side.queue_length
        self._max_open_spans, self._logs_min = settings.max_open_spans, settings.logs_min_severity
        self._logs_queue_limit = settings.logs_queue_limit  # read per record: computed once
        # Span id -> its queued start, for every queued span not yet ended (job thread; bounded,
        # oldest out): its end swaps the span there for its fields (`watch.SpanStarted`).
        self._in_scope: OrderedDict[int, SpanStarted] = OrderedDict()
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
                (parent is not None and parent[SPAN_ID] in in_scope)
                or JOB_ID in attributes
                or JOB_EVENT_TYPE in attributes
                or (
                    self._dialects is not None
                    # The OTLP number without hashing the enum: on every span outside jobs.
                    and self._dialects.may_start_job(span.name, otlp_kind(span.kind), attributes)
                )
                or (
                    parent is not None
                    and parent[SPAN_ID] in self._bare
                    and self._claims_parent(parent[SPAN_ID])
                )
            ):
                if self._late_kinds and not attributes and span.kind in self._late_kinds:
                    bare = self._bare  # named nothing at its start: a dialect may claim it late
                    bare[span.context[SPAN_ID]] = span
                    if len(bare) > MAX_BARE_SPANS:
                        bare.popitem(last=False)
                return  # outside any job scope: nothing else happens, ever
            started = _new_started(SpanStarted)
            started.span = span
            # A job span's identity is read as it starts (`SpanStarted`): copied now.
            started.attributes = dict(attributes) if JOB_ID in attributes else None
            if JOB_EVENT_TYPE not in attributes:  # an event is whole at its start
                in_scope[span.context[SPAN_ID]] = started
                if len(in_scope) > self._max_open_spans:
                    # The translation forgets (and counts) the same oldest span.
                    in_scope.popitem(last=False)
            self._submit(started)
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    def _claims_parent(self, parent_id: int) -> bool:
        """Whether the parent, which named nothing at its start (`_bare`), is a dialect's job
        now that its attributes are set (DBOS sets them just after starting its span, before
        any child): if so its start (its own start time) is queued, before its child's. Asked
        once, at its first child's start."""
        parent = self._bare.pop(parent_id, None)
        if parent is None or not parent.is_recording():  # a sibling asked, or it has ended
            return False
        attributes = attribute_dict(parent)
        assert self._dialects is not None  # bare spans are kept only with dialects
        if (
            JOB_ID in attributes
            or JOB_EVENT_TYPE in attributes
            or self._dialects.may_claim_late(parent.name, otlp_kind(parent.kind), attributes)
            is None
        ):
            return False
        started = _new_started(SpanStarted)
        started.span, started.attributes = parent, None
        self._in_scope[parent_id] = started
        self._submit(started)
        return True

    def on_end(self, span: ReadableSpan) -> None:
        try:
            started = self._in_scope.pop(span.context[SPAN_ID], None)
            if started is not None:
                # Plain fields, not the span: the queue keeps no SDK object past the span's end.
                fields = started.fields = ended_fields(span)
                started.span = None
                self._submit(_new(SpanEnded, (fields,)))
                return
            attributes = attribute_dict(span)
            if JOB_ID in attributes and JOB_EVENT_TYPE not in attributes:
                # A job span that named its job only by its end: its attempt is written now,
                # from its end (what ran in it before was outside any job scope).
                started = SpanStarted(None)
                fields = started.fields = ended_fields(span)
                self._submit(started)
                self._submit(_new(SpanEnded, (fields,)))
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    # -- log record hook (application threads) ------------------------------------------------

    def on_emit(self, log_data: Any) -> None:
        """A log record (``ReadWriteLogRecord``; ``LogData`` before SDK 1.39): queued as it is
        when its span is in a job scope and it is a progress event or severe enough."""
        try:
            record = getattr(log_data, "log_record", log_data)
            if record.span_id not in self._in_scope:
                return  # outside any job scope (or no span context): nothing else happens
            severity = record.severity_number
            if (
                severity is None or getattr(severity, "_value_", 0) < self._logs_min
            ) and not self._worth_reading(record):
                return  # below the minimum severity, and not a progress event
            scope = getattr(log_data, "instrumentation_scope", None)
            if is_own_logger(getattr(scope, "name", None)):
                return  # our own record (a setup warning in a job's context): not the job's line
            if self._queued() >= self._logs_queue_limit:
                # A flood of lines must not take the room a step's start or end needs.
                self._stats.problem("dropped_LogEmitted", "queue three quarters full")
                return
            self._submit(_new(LogEmitted, (log_data,)))
        except Exception as error:  # noqa: BLE001 - the SDK would raise it into the job
            self._stats.problem("internal_error", error)

    # Older SDKs (1.30 among them) name the hook ``emit``; 1.36 calls on_emit with LogData.
    emit = on_emit

    def _worth_reading(self, record: Any) -> bool:
        """A record under the minimum severity the writer still reads: a progress event, an
        exception event (a failing step's text), or one with no severity number (its text may
        name one; no minimum: any record)."""
        event_name = getattr(record, "event_name", None)  # the SDK has it since 1.31
        if event_name == PROGRESS_EVENT or is_exception_event(event_name):
            return True
        return record.severity_number is None and (
            self._logs_min == 0 or bool(record.severity_text)
        )

    # -- SpanProcessor lifecycle --------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """True once everything recorded before the call is in the database (trailing progress
        included); False if ``timeout_millis`` passed first."""
        written = self._side.flush(timeout_millis / 1000.0)
        if not written:  # one warning per call: the caller asked and is told
            self._stats.add("flushes_incomplete")
            data = self.stats()
            logger.warning(
                "otel_jobsteps force_flush(%d) returned before everything was written: %d"
                " commands still queued, kept and retried (last error: %s)",
                timeout_millis,
                data["queued"],
                data["last_error"],
            )
        return written

    def shutdown(self) -> None:
        """Write what is queued, within the shutdown timeout, and stop; safe to call twice."""
        if self._shut_down:
            return
        self._shut_down = True
        self._side.shutdown(self._settings.shutdown_timeout_s)

    def stats(self) -> dict[str, Any]:
        """Counters: commands handled, operations written, retries, drops by kind, last error."""
        return self._side.stats()

    def _after_fork_in_child(self) -> None:
        """The child starts with nothing of the parent's: its open spans belong to the parent."""
        self._stats.reset()
        self._in_scope = OrderedDict()
        self._side.after_fork_in_child()
