"""The processor's settings: arguments, else ``OTEL_JOBSTEPS_*`` variables, else defaults.

Validated once, at construction; the writer process receives the same object as JSON.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from .._core.detail import DEFAULT_MAX_DETAIL_BYTES
from .._core.dialects import select_dialects
from .._core.recorder import DEFAULT_LOGS_MAX_PER_STEP
from .._core.translate import DEFAULT_LOGS_MIN_SEVERITY, DEFAULT_MAX_OPEN_SPANS, logs_settings
from .._pg.db import check_dsn
from ..errors import ConfigurationError

__all__ = ["WRITERS", "Settings"]

# Where spans are interpreted and written: a thread of the job's process, or a child process.
WRITERS = ("thread", "process")

# Settings that must be above zero (debounce_ms may be 0: no debounce), in the order checked.
_POSITIVE = (
    "debounce_ms",
    "max_queue_size",
    "shutdown_timeout_ms",
    "connect_timeout_s",
    "statement_timeout_ms",
    "heartbeat_interval_s",
    "max_detail_bytes",
    "max_open_spans",
)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None


@dataclass(frozen=True)
class Settings:
    """What the writer side needs, validated; ``dsn`` is empty when a store is handed in."""

    dsn: str = ""
    schema: str = "public"
    writer: str = "thread"
    debounce_ms: float = 1000
    max_queue_size: int = 50_000
    shutdown_timeout_ms: int = 5000
    connect_timeout_s: float = 5.0
    statement_timeout_ms: int = 30_000
    heartbeat_interval_s: float = 30.0
    max_detail_bytes: int = DEFAULT_MAX_DETAIL_BYTES
    max_open_spans: int = DEFAULT_MAX_OPEN_SPANS
    auto_migrate: bool = False
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP
    dialects: tuple[str, ...] = ()  # the selected dialects' names (`_core.dialects`)

    @classmethod
    def from_environment(cls, *, has_store: bool = False, **given: Any) -> Settings:
        """The ``given`` values (None: not given), the environment's for the rest; a bad one
        raises ConfigurationError. ``has_store``: rows go to a store handed in, not a DSN."""
        values = {name: value for name, value in given.items() if value is not None}
        dsn = values.pop("dsn", None) or os.environ.get("OTEL_JOBSTEPS_DSN") or ""
        if not has_store and not dsn:
            raise ConfigurationError("no database: pass dsn= or set OTEL_JOBSTEPS_DSN")
        writer = values.pop("writer", None)
        if writer is None:  # the environment's choice is for processors that write to PostgreSQL
            writer = "thread" if has_store else os.environ.get("OTEL_JOBSTEPS_WRITER")
        writer = writer or "thread"
        if writer not in WRITERS:
            raise ConfigurationError(f"writer must be one of {', '.join(WRITERS)}, got {writer!r}")
        if writer == "process" and has_store:
            raise ConfigurationError("writer='process' writes to PostgreSQL: pass dsn=, not store=")
        values["schema"] = (
            values.get("schema") or os.environ.get("OTEL_JOBSTEPS_SCHEMA") or "public"
        )
        defaults: dict[str, Any] = {field.name: field.default for field in dataclasses.fields(cls)}
        for name in ("debounce_ms", "max_queue_size", "shutdown_timeout_ms", "max_open_spans"):
            if name not in values:
                values[name] = _env_int(f"OTEL_JOBSTEPS_{name.upper()}", defaults[name])
        values["logs_min_severity"], values["logs_max_per_step"] = logs_settings(
            values.get("logs_min_severity"), values.get("logs_max_per_step"), environ=os.environ
        )
        chosen = values.pop("dialects", None)
        if chosen is None:
            chosen = os.environ.get("OTEL_JOBSTEPS_DIALECTS")
        values["dialects"] = select_dialects(chosen).names
        settings = cls(dsn=dsn, writer=writer, **values)
        settings._check_positive()
        if not has_store:
            check_dsn(dsn)
        return settings

    def _check_positive(self) -> None:
        for name in _POSITIVE:
            value = getattr(self, name)
            if value < 0 or (value == 0 and name != "debounce_ms"):
                raise ConfigurationError(f"{name} must be positive, got {value!r}")

    @property
    def shutdown_timeout_s(self) -> float:
        return self.shutdown_timeout_ms / 1000.0

    @property
    def logs_queue_limit(self) -> int:
        """Log records are shed once the queue is this full: the rest of it is for spans."""
        return max(1, self.max_queue_size * 3 // 4)

    def payload(self) -> dict[str, Any]:
        """The settings as a JSON-able dict, for the writer process."""
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Settings:
        """The settings `payload` made (already validated in the job's process)."""
        return cls(**{**payload, "dialects": tuple(payload.get("dialects", ()))})
