"""Nothing records in silence: each missing piece of setup warns once, saying what to do.

And `ensure_processor` adds the processor from ``OTEL_JOBSTEPS_DSN`` beside what is there.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from otel_jobsteps import JobStepsProcessor, context, job_attempt, job_detail, progress, step
from otel_jobsteps.auto import ensure_processor, feeds_job_steps
from tests.helpers import TracingFactory

NO_PROVIDER_SCRIPT = """
from otel_jobsteps import job_attempt, progress, step

progress(pct=1)
with step("OUTSIDE"):
    pass
for job_id in ("1", "2"):
    with job_attempt("render", job_id, "thumbnail"):
        with step("RENDER"):
            progress(pct=2)
"""


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first occurrence of every warning."""
    monkeypatch.setattr(context, "_warned", set())


@pytest.fixture
def bare_provider() -> Iterator[TracerProvider]:
    provider = TracerProvider()
    yield provider
    provider.shutdown()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_jobsteps"]


def test_without_any_provider_each_no_op_warns_once_on_stderr() -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_PROVIDER_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0].startswith("progress() ran outside a step")
    assert lines[1].startswith("step('OUTSIDE') ran outside a job")
    assert lines[2].startswith("no OpenTelemetry SDK tracer provider is set")
    assert "OTEL_JOBSTEPS_DSN" in lines[2]


def test_a_provider_without_the_processor_warns_once(
    fresh_warnings: None, bare_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    tracer = bare_provider.get_tracer("tests")
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
        for job_id in ("1", "2"):
            with job_attempt("render", job_id, "thumbnail", tracer=tracer):
                with step("RENDER", tracer=tracer):
                    progress(pct=1)

    [warning] = _warnings(caplog)
    assert "has no JobStepsProcessor" in warning
    assert "add JobStepsProcessor() to the TracerProvider" in warning


def test_a_recorded_job_warns_nothing(
    fresh_warnings: None, tracing: TracingFactory, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    tracer, processor = tracing()
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
        with job_attempt("render", "42", "thumbnail", tracer=tracer):
            with step("RENDER", tracer=tracer):
                progress(pct=1)
    assert processor.force_flush(10_000)

    assert _warnings(caplog) == []
    detail = job_detail(dsn, "render", "42")
    assert detail is not None
    assert [(s.key, s.status) for s in detail.steps] == [("RENDER", "COMPLETED")]


def test_ensure_processor_adds_one_from_the_environment_once(
    bare_provider: TracerProvider, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_JOBSTEPS_DSN", dsn)
    assert feeds_job_steps(bare_provider) is False

    assert ensure_processor(bare_provider)
    assert ensure_processor(bare_provider)

    processors = bare_provider._active_span_processor._span_processors
    assert [type(p) for p in processors] == [JobStepsProcessor]
    tracer = bare_provider.get_tracer("tests")
    with job_attempt("render", "43", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            pass
    assert bare_provider.force_flush(10_000)
    assert job_detail(dsn, "render", "43") is not None


def test_ensure_processor_without_the_variable_changes_nothing(
    bare_provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_JOBSTEPS_DSN", raising=False)

    assert not ensure_processor(bare_provider)
    assert bare_provider._active_span_processor._span_processors == ()


GLOBAL_SCRIPT = """
from opentelemetry import trace
from otel_jobsteps.auto import ensure_processor, feeds_job_steps

print(ensure_processor(), type(trace.get_tracer_provider()).__name__,
      feeds_job_steps(trace.get_tracer_provider()))
"""


@pytest.mark.parametrize(
    ("sdk_disabled", "expected"),
    [
        pytest.param("", "True TracerProvider True", id="sets-a-provider"),
        pytest.param("true", "False ProxyTracerProvider None", id="otel-sdk-disabled"),
    ],
)
def test_ensure_processor_without_a_provider(dsn: str, sdk_disabled: str, expected: str) -> None:
    env = {**os.environ, "OTEL_JOBSTEPS_DSN": dsn, "OTEL_SDK_DISABLED": sdk_disabled}
    result = subprocess.run(
        [sys.executable, "-c", GLOBAL_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_a_job_span_the_sampler_drops_warns_once(
    fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    tracer = provider.get_tracer("tests")
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
        for job_id in ("1", "2"):
            with job_attempt("render", job_id, "thumbnail", tracer=tracer):
                pass
    provider.shutdown()

    [warning] = _warnings(caplog)
    assert "the job span is not recorded" in warning
    assert "OTEL_TRACES_SAMPLER=always_on" in warning
