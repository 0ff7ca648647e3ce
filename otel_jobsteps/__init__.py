"""otel_jobsteps: which step of which attempt of a background job ran, failed or is running.

Instrument job code with an ordinary OpenTelemetry tracer, add `JobStepsProcessor` to the
TracerProvider, and read the ``job_event`` / ``job_log`` tables (or `job_detail`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import attributes
from .attributes import *  # noqa: F403 - the span attribute names are public from here too
from .context import job_attempt, progress, record_event, record_job_event, step
from .errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    JobStepsError,
    SchemaNotMigratedError,
)

if TYPE_CHECKING:
    from .maintenance import PruneResult, SweptStep, prune, sweep
    from .processor import JobStepsProcessor
    from .query import (
        AttemptSummary,
        EventRecord,
        JobDetail,
        JobLogEntry,
        JobSummary,
        StepRecord,
        job_detail,
        list_jobs,
    )
    from .sampling import RecordJobsSampler
    from .schema import migrate

# Loaded at first use, so job code importing the sugar does not load the write path (psycopg).
_LAZY = {
    name: module
    for module, names in {
        "maintenance": ("PruneResult", "SweptStep", "prune", "sweep"),
        "processor": ("JobStepsProcessor",),
        "query": (
            *("AttemptSummary", "EventRecord", "JobDetail", "JobLogEntry", "JobSummary"),
            *("StepRecord", "job_detail", "list_jobs"),
        ),
        "sampling": ("RecordJobsSampler",),
        "schema": ("migrate",),
    }.items()
    for name in names
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"  # the one source: pyproject.toml reads it (tool.setuptools.dynamic)

__all__ = [
    *attributes.__all__,
    "AttemptSummary",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "EventRecord",
    "JobDetail",
    "JobLogEntry",
    "JobStepsError",
    "JobStepsProcessor",
    "JobSummary",
    "PruneResult",
    "RecordJobsSampler",
    "SchemaNotMigratedError",
    "StepRecord",
    "SweptStep",
    "__version__",
    "job_attempt",
    "job_detail",
    "list_jobs",
    "migrate",
    "progress",
    "prune",
    "record_event",
    "record_job_event",
    "step",
    "sweep",
]
