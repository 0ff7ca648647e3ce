"""What one receiver is told: where to write, how to derive rows, what to accept.

`serve_collect` hands these to uvicorn's worker processes through the environment (they import
the app anew), so they round-trip through JSON.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any

from .._core.dialects import DEFAULT_DIALECTS, Dialects, select_dialects
from .._core.recorder import DEFAULT_LOGS_MAX_PER_STEP
from .._core.translate import DEFAULT_LOGS_MIN_SEVERITY
from .mapping import JobMapping

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_SPANS_PER_TRACE",
    "DEFAULT_MAX_WAITING_LOGS_PER_TRACE",
    "SHUTDOWN_GRACE_S",
    "CollectSettings",
]

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # after decompression
DEFAULT_BODY_TIMEOUT_S = 10.0  # a body slower than this is answered 408: it holds a connection
SHUTDOWN_GRACE_S = 30  # how long requests in flight may take to finish once told to stop
DEFAULT_MAX_SPANS_PER_TRACE = 10_000
DEFAULT_MAX_WAITING_LOGS_PER_TRACE = 10_000  # log records waiting for their span, per trace


@dataclass(frozen=True, slots=True)
class CollectSettings:
    """A receiver's settings. ``connections``: database connections serving requests in
    parallel; traces untouched for ``settle_after_s`` are settled, or for
    ``settle_open_after_s`` while a span still waits (a long step, a job still running);
    ``dialects`` (names) and ``mappings`` turn other instrumentations' spans into jobs;
    ``grpc_listen``: gRPC's ``HOST:PORT`` as grpc spells it, or None for no gRPC listener;
    log records below ``logs_min_severity`` are not written, at most ``logs_max_per_step`` per
    attempt and step are, and at most ``max_waiting_logs_per_trace`` wait for their span;
    ``loopback_host``: the loopback address HTTP listens on (its requests must name a
    loopback Host), None when it listens wider."""

    dsn: str
    schema: str = "public"
    connections: int = 4
    settle_after_s: float = 600.0
    settle_open_after_s: float = 86_400.0
    mappings: tuple[JobMapping, ...] = ()
    dialects: tuple[str, ...] = DEFAULT_DIALECTS
    max_spans_per_trace: int = DEFAULT_MAX_SPANS_PER_TRACE
    connect_timeout_s: float = 5.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    retry_after_s: int = 2
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    grpc_listen: str | None = None
    access_log: bool = False
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP
    max_waiting_logs_per_trace: int = DEFAULT_MAX_WAITING_LOGS_PER_TRACE
    loopback_host: str | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CollectSettings:
        fields: dict[str, Any] = json.loads(text)
        mappings = tuple(JobMapping(**mapping) for mapping in fields.pop("mappings"))
        dialects = tuple(fields.pop("dialects"))
        return cls(**fields, mappings=mappings, dialects=dialects)

    def job_dialects(self) -> Dialects:
        """The dialects selected, the user's mappings first (`_core.dialects`)."""
        return _dialects(self.dialects, self.mappings)


@functools.lru_cache(maxsize=8)
def _dialects(names: tuple[str, ...], mappings: tuple[JobMapping, ...]) -> Dialects:
    return select_dialects(names).with_mappings(mappings)
