"""Adding a `JobStepsProcessor` from the environment where no user code sets a provider up.

Used by ``opentelemetry-instrument`` and the queue adapters; it adds beside what is configured
(tracer and SDK logger provider), once, and never replaces a provider, exporter or sampler.
"""

from __future__ import annotations

import os
import threading

from opentelemetry import trace
from opentelemetry._logs import get_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from ._live.feeds import feeds_job_steps
from ._telemetry.log import logger
from .errors import JobStepsError
from .processor import JobStepsProcessor

__all__ = [
    "DOMAIN_VARIABLE",
    "DSN_VARIABLE",
    "attach_from_environment",
    "ensure_processor",
    "feeds_job_steps",
    "log_into",
]

DSN_VARIABLE = "OTEL_JOBSTEPS_DSN"
DOMAIN_VARIABLE = "OTEL_JOBSTEPS_DOMAIN"
"""The ``job.domain`` of jobs whose queue integration was not given one (zero-code setup)."""
_lock = threading.Lock()


def log_into(processor: JobStepsProcessor, provider: object | None = None) -> bool:
    """Add ``processor`` to ``provider`` (default: the global LoggerProvider) when that is an
    SDK one not fed by a `JobStepsProcessor` yet; True if it is fed by one now."""
    target = get_logger_provider() if provider is None else provider
    if not isinstance(target, LoggerProvider):
        return False  # no logs SDK configured (the API's no-op or proxy): nothing to add to
    multi = getattr(target, "_multi_log_record_processor", None)
    present = getattr(multi, "_log_record_processors", ())
    if not any(isinstance(p, JobStepsProcessor) for p in present):
        target.add_log_record_processor(processor)
    return True


def ensure_processor(provider: trace.TracerProvider | None = None) -> bool:
    """Make ``provider`` (default: the global one) feed a `JobStepsProcessor`; True if it does.

    With ``OTEL_JOBSTEPS_DSN`` set: an SDK provider without one gets one added; no provider at
    all (the API's proxy) becomes an SDK provider with just this processor, set globally, its
    sampler and resource from the ``OTEL_*`` environment as usual. Without the variable nothing
    changes and the answer is False. A bad DSN is logged, never raised: a worker keeps running.
    """
    with _lock:
        target = provider or trace.get_tracer_provider()
        if isinstance(target, TracerProvider) and feeds_job_steps(target) is not False:
            return True
        if not os.environ.get(DSN_VARIABLE):
            return False
        creates = provider is None and isinstance(target, trace.ProxyTracerProvider)
        if not (creates or isinstance(target, TracerProvider)):
            logger.warning(
                "cannot add a JobStepsProcessor to %s (not an OpenTelemetry SDK TracerProvider)",
                type(target).__name__,
            )
            return False
        if creates and _sdk_disabled():
            logger.info("OTEL_SDK_DISABLED is true: no tracer provider is set up here")
            return False
        try:
            processor = JobStepsProcessor()
        except JobStepsError as error:
            logger.error("%s: job steps are not recorded: %s", DSN_VARIABLE, error)
            return False
        log_into(processor)
        if isinstance(target, TracerProvider):
            target.add_span_processor(processor)
            return True
        created = TracerProvider()
        created.add_span_processor(processor)
        trace.set_tracer_provider(created)
        logger.info("no tracer provider was set: one with a JobStepsProcessor is now global")
        return True


def _sdk_disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def attach_from_environment() -> None:
    """The ``opentelemetry_post_instrument`` hook: add the processor when the DSN is set
    (and the SDK is not disabled with ``OTEL_SDK_DISABLED``)."""
    if os.environ.get(DSN_VARIABLE) and not _sdk_disabled():
        ensure_processor()
