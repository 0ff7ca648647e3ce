"""What the queue adapters share: their settings, the wrapped marker, retries, flushing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import trace

from .. import auto, context
from .._telemetry.log import logger as package_logger
from ..attributes import JOB_OUTCOME
from . import EVENT_RETRY_SCHEDULED, OUTCOME_RETRY

__all__ = [
    "AdapterSettings",
    "ensure_recording",
    "flush_provider",
    "is_wrapped",
    "logger",
    "mark_wrapped",
    "record_retry_scheduled",
    "require_domain",
    "try_number",
]

logger = package_logger.getChild("integrations")

_WRAPPED = "__otel_jobsteps_wrapped__"
_ensured: set[int] = set()
_F = TypeVar("_F", bound=Callable[..., Any])


def require_domain(domain: str) -> None:
    if not domain:
        raise ValueError("domain must be a non-empty string")


def try_number(value: object) -> int | None:
    """A try count a broker gave back (ASCII digits, as bytes or str), else None."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def is_wrapped(function: object) -> bool:
    """Whether ``function`` is already an adapter's wrapper (instrumenting twice wraps once)."""
    return bool(getattr(function, _WRAPPED, False))


def mark_wrapped(function: _F) -> _F:
    setattr(function, _WRAPPED, True)
    return function


def ensure_recording(provider: trace.TracerProvider | None) -> None:
    """Once per process and provider, before jobs run: a JobStepsProcessor on the provider,
    added from ``OTEL_JOBSTEPS_DSN`` when missing, else a warning saying what to do."""
    if id(provider) in _ensured:
        return
    _ensured.add(id(provider))
    if not auto.ensure_processor(provider):
        context.warn_missing_processor(provider)


@dataclass(frozen=True)
class AdapterSettings:
    """What an adapter's ``instrument()`` was given: its tracer's name, the jobs' domain and
    the tracer's provider (an adapter with options of its own subclasses it)."""

    tracer_name: str
    domain: str
    tracer_provider: trace.TracerProvider | None

    def __post_init__(self) -> None:
        require_domain(self.domain)

    def tracer(self) -> trace.Tracer:
        """The adapter's tracer, its provider checked first to record job steps."""
        ensure_recording(self.tracer_provider)
        return trace.get_tracer(self.tracer_name, tracer_provider=self.tracer_provider)


def record_retry_scheduled(
    span: trace.Span, tracer: trace.Tracer, message: str | None = None, **detail: Any
) -> None:
    """FAILED ``retry`` for the current attempt plus its RETRY_SCHEDULED event."""
    span.set_attribute(JOB_OUTCOME, OUTCOME_RETRY)
    context.record_event(EVENT_RETRY_SCHEDULED, message, tracer=tracer, **detail)


def flush_provider(provider: trace.TracerProvider | None, timeout_ms: int) -> bool:
    """Flush the (given or global) SDK tracer provider; True when it reported success.
    For processes a queue ends with ``os._exit``, which skips the atexit shutdown."""
    provider = provider or trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return True
    try:
        return bool(force_flush(timeout_ms))
    except Exception as error:  # noqa: BLE001 - flushing must never break the worker
        logger.warning("flushing the tracer provider failed: %s", error)
        return False
