"""The package's one logger: every module logs as ``otel_jobsteps`` (children add a suffix).

Its records are never a job's log lines: both doors drop a record whose logger (its
instrumentation scope, for the SDK's logging handler) is this one or a child.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["is_own_logger", "logger", "warn_on_console"]

LOGGER_NAME = "otel_jobsteps"
logger = logging.getLogger(LOGGER_NAME)


def is_own_logger(name: str | None) -> bool:
    """Whether ``name`` (a logger's, or a log record's instrumentation scope) is ours."""
    return name is not None and (name == LOGGER_NAME or name.startswith(LOGGER_NAME + "."))


def _exports(handler: logging.Handler) -> bool:
    """OpenTelemetry's logging handlers send records away; no person reads them there."""
    return type(handler).__module__.startswith("opentelemetry.")


def _shown_locally() -> bool:
    """Whether a WARNING of ours reaches a handler that is not an exporter, as `logging` walks
    the hierarchy (no handler at all: `logging.lastResort` prints it to stderr)."""
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if handler.level <= logging.WARNING and not _exports(handler):
                return True
        current = current.parent if current.propagate else None
    return not found


def warn_on_console(message: str) -> None:
    """Log a setup warning; when only exporting handlers would get it (zero-code logging), also
    write it to stderr: a warning about setup must reach the person running the worker."""
    logger.warning("%s", message)
    if logger.isEnabledFor(logging.WARNING) and not _shown_locally():
        print(message, file=sys.stderr)
