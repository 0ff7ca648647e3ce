"""The setup warning's hint names what is missing: under ``opentelemetry-instrument`` an
exporter OTEL_TRACES_EXPORTER asks for and nobody installed (the `instrument` extra brings the
OTLP ones), not the command it already runs under."""

from __future__ import annotations

import importlib.metadata

import pytest
from packaging.requirements import Requirement

from otel_jobsteps._live.setup import SETUP, exporter_entry_points, setup_hint

BOTH_OTLP = {"otlp_proto_grpc", "otlp_proto_http", "console"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, [], id="unset"),
        pytest.param({"OTEL_TRACES_EXPORTER": "none"}, [], id="none"),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp_proto_grpc"], id="otlp-grpc-default"),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            ["otlp_proto_http"],
            id="otlp-http",
        ),
        pytest.param(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            },
            ["otlp_proto_grpc"],
            id="traces-protocol-wins",
        ),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "console, zipkin_json"},
            ["console", "zipkin_json"],
            id="a-list",
        ),
    ],
)
def test_exporter_entry_points_resolve_otlp_by_protocol(
    environ: dict[str, str], expected: list[str]
) -> None:
    assert exporter_entry_points(environ) == expected


def test_outside_opentelemetry_instrument_the_hint_names_both_setups() -> None:
    hint = setup_hint({"OTEL_TRACES_EXPORTER": "otlp"}, instrumented=False, installed=())
    assert hint == SETUP
    assert "opentelemetry-instrument" in hint


def test_under_opentelemetry_instrument_without_the_otlp_exporter_it_says_so() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}

    hint = setup_hint(environ, instrumented=True, installed={"console"})

    assert hint.startswith("no OTLP exporter installed ('otlp_proto_grpc'")
    assert "pip install 'otel_jobsteps[instrument]'" in hint
    assert "run the worker under opentelemetry-instrument" not in hint


def test_under_opentelemetry_instrument_another_missing_exporter_is_named() -> None:
    hint = setup_hint({"OTEL_TRACES_EXPORTER": "zipkin_json"}, instrumented=True, installed=())
    assert "'zipkin_json'" in hint
    assert "[instrument]" not in hint


def test_under_opentelemetry_instrument_with_its_exporters_it_asks_for_the_dsn() -> None:
    hint = setup_hint({"OTEL_TRACES_EXPORTER": "otlp"}, instrumented=True, installed=BOTH_OTLP)
    assert hint.startswith("set OTEL_JOBSTEPS_DSN")
    assert "otel-jobsteps collect" in hint


@pytest.mark.parametrize("exporter", ["otlp-proto-grpc", "otlp-proto-http"])
def test_the_instrument_extra_installs_the_otlp_exporters(exporter: str) -> None:
    name = f"opentelemetry-exporter-{exporter}"
    requirements = [Requirement(r) for r in importlib.metadata.requires("otel_jobsteps") or ()]
    instrument = {"extra": "instrument"}
    assert name in [r.name for r in requirements if r.marker and r.marker.evaluate(instrument)]
