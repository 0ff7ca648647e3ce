"""RecordJobsSampler's decisions on real SDK spans, its ratio argument, and the SDK's own
resolution of its entry point (``OTEL_TRACES_SAMPLER``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk._configuration import _import_sampler
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState

from otel_jobsteps import (
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_STEP_KEY,
    ConfigurationError,
    RecordJobsSampler,
)
from otel_jobsteps.sampling import ENTRY_POINT, parentbased_traceidratio

TRACE_ID = 0x5B8AA5A2D2C872E8321CF37308D69DF2


def _decide(sampler: Sampler, parent: Context | None = None, **attributes: Any) -> SamplingResult:
    return sampler.should_sample(parent, TRACE_ID, "span", attributes=attributes or None)


def _context_of(span: trace.Span) -> Context:
    return trace.set_span_in_context(span)


@pytest.mark.parametrize("name", [JOB_ID, JOB_STEP_KEY, JOB_EVENT_TYPE])
def test_a_dropped_span_that_names_a_job_is_recorded_with_its_attributes(name: str) -> None:
    result = _decide(RecordJobsSampler(ALWAYS_OFF), **{name: "42", "other": 1})

    assert result.decision is Decision.RECORD_ONLY
    assert dict(result.attributes) == {name: "42", "other": 1}


def test_a_span_outside_jobs_gets_the_roots_own_result() -> None:
    sampler = RecordJobsSampler(ALWAYS_OFF)
    unsampled = NonRecordingSpan(SpanContext(TRACE_ID, 7, is_remote=True))

    assert _decide(sampler, other=1).decision is Decision.DROP
    assert _decide(sampler, _context_of(unsampled)).decision is Decision.DROP


def test_a_sampled_span_stays_sampled_with_the_roots_attributes() -> None:
    result = _decide(RecordJobsSampler(ALWAYS_ON), **{JOB_ID: "42"})

    assert result.decision is Decision.RECORD_AND_SAMPLE
    assert dict(result.attributes) == {JOB_ID: "42"}


def test_the_children_of_a_kept_job_are_recorded_and_unsampled() -> None:
    provider = TracerProvider(sampler=RecordJobsSampler(ParentBased(ALWAYS_OFF)))
    tracer = provider.get_tracer("tests")
    seen = []
    with tracer.start_as_current_span("request") as outside:
        seen.append(outside)
    with tracer.start_as_current_span("job", attributes={JOB_ID: "42"}) as job:
        seen.append(job)
        with tracer.start_as_current_span("http") as plain:
            seen.append(plain)
            with tracer.start_as_current_span("deeper") as deeper:
                seen.append(deeper)
                recording = [span.is_recording() for span in seen]

    assert recording == [False, True, True, True]
    assert not any(span.get_span_context().trace_flags.sampled for span in seen)


def test_the_roots_trace_state_is_kept() -> None:
    state = TraceState([("vendor", "value")])
    parent = NonRecordingSpan(SpanContext(TRACE_ID, 7, is_remote=True, trace_state=state))

    result = _decide(
        RecordJobsSampler(ParentBased(TraceIdRatioBased(0.0))),
        _context_of(parent),
        **{JOB_ID: "42"},
    )

    assert result.decision is Decision.RECORD_ONLY
    assert result.trace_state == state


def test_a_remote_unsampled_parent_with_a_job_span_records_the_job() -> None:
    parent = NonRecordingSpan(SpanContext(TRACE_ID, 7, is_remote=True, trace_flags=TraceFlags(0)))

    result = _decide(
        RecordJobsSampler(ParentBased(ALWAYS_ON)), _context_of(parent), **{JOB_ID: "1"}
    )

    assert result.decision is Decision.RECORD_ONLY


class DropWithReason(Sampler):
    """A root that drops every span and says why in an attribute."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.DROP, {"sampler.reason": "quota"})

    def get_description(self) -> str:
        return "DropWithReason"


def test_attributes_a_root_adds_to_a_drop_are_kept_beside_the_spans() -> None:
    result = _decide(RecordJobsSampler(DropWithReason()), **{JOB_ID: "42"})

    assert result.decision is Decision.RECORD_ONLY
    assert dict(result.attributes) == {JOB_ID: "42", "sampler.reason": "quota"}


def test_description_names_the_root() -> None:
    assert RecordJobsSampler(ALWAYS_OFF).get_description() == "RecordJobsSampler{AlwaysOffSampler}"


def test_a_root_that_is_no_sampler_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="needs an OpenTelemetry Sampler, got float"):
        RecordJobsSampler(0.05)  # type: ignore[arg-type]


@pytest.mark.parametrize(("argument", "rate"), [(None, 1.0), ("", 1.0), ("0.05", 0.05), ("0", 0.0)])
def test_the_entry_points_ratio(argument: str | None, rate: float) -> None:
    description = parentbased_traceidratio(argument).get_description()

    assert description.startswith(
        f"RecordJobsSampler{{ParentBased{{root:TraceIdRatioBased{{{rate}}}"
    )


@pytest.mark.parametrize("argument", ["abc", "-0.1", "1.5", "nan", "inf", "5%", "0.05\n\x1b[2J"])
def test_a_bad_ratio_is_a_configuration_error(argument: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parentbased_traceidratio(argument)

    message = str(raised.value)
    assert message.startswith(f"OTEL_TRACES_SAMPLER_ARG for {ENTRY_POINT} must be a ratio")
    assert "\n" not in message
    assert "\x1b" not in message


def test_the_sdk_resolves_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.05")

    sampler = _import_sampler(ENTRY_POINT)

    assert isinstance(sampler, RecordJobsSampler)
    assert "TraceIdRatioBased{0.05}" in sampler.get_description()


def test_the_sdk_reports_a_bad_ratio_and_names_the_rule(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's configurator catches a factory's error, logs it and uses its default sampler
    (parentbased_always_on: every job recorded, every span exported); our message says why."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "five percent")

    with caplog.at_level(logging.WARNING):
        assert _import_sampler(ENTRY_POINT) is None

    assert "must be a ratio from 0 to 1 (e.g. 0.05), got 'five percent'" in caplog.text


def test_a_span_a_dialect_may_claim_as_a_job_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The celery dialect claims a CONSUMER span named ``run/...`` at its start."""

    def decide(sampler: Sampler, kind: SpanKind) -> Decision:
        return sampler.should_sample(None, TRACE_ID, "run/add", kind, {"celery.x": 1}).decision

    monkeypatch.setenv("OTEL_JOBSTEPS_DIALECTS", "celery")
    from_environment = RecordJobsSampler(ALWAYS_OFF)

    assert decide(from_environment, SpanKind.CONSUMER) is Decision.RECORD_ONLY
    assert decide(from_environment, SpanKind.PRODUCER) is Decision.DROP  # kind as OTLP's number
    assert decide(RecordJobsSampler(ALWAYS_OFF, dialects="none"), SpanKind.CONSUMER) is (
        Decision.DROP
    )


def test_an_unknown_dialect_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown dialect 'celry'"):
        RecordJobsSampler(ALWAYS_OFF, dialects="celry")
