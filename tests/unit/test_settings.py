"""The processor's one settings object: arguments, the environment, validation, payload."""

from __future__ import annotations

import json

import pytest

from otel_jobsteps import ConfigurationError
from otel_jobsteps._live.settings import Settings

DSN = "postgresql://nobody@127.0.0.1:1/never"


def test_arguments_win_over_the_environment_and_defaults_fill_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_JOBSTEPS_DEBOUNCE_MS", "250")
    monkeypatch.setenv("OTEL_JOBSTEPS_MAX_QUEUE_SIZE", "80")
    settings = Settings.from_environment(dsn=DSN, max_queue_size=40, schema=None)
    assert (settings.debounce_ms, settings.max_queue_size, settings.schema) == (250, 40, "public")
    assert (settings.shutdown_timeout_s, settings.logs_queue_limit) == (5.0, 30)


def test_the_payload_is_json_and_gives_the_same_settings() -> None:
    settings = Settings.from_environment(dsn=DSN, writer="process", logs_min_severity="WARN")
    payload = json.loads(json.dumps(settings.payload()))
    assert Settings.from_payload(payload) == settings
    assert payload["logs_min_severity"] == 13


def test_a_store_needs_no_dsn_and_ignores_the_environments_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_JOBSTEPS_DSN", raising=False)
    monkeypatch.setenv("OTEL_JOBSTEPS_WRITER", "process")
    assert Settings.from_environment(has_store=True).writer == "thread"
    with pytest.raises(ConfigurationError, match="OTEL_JOBSTEPS_DSN"):
        Settings.from_environment()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param({"heartbeat_interval_s": 0}, "heartbeat_interval_s must be positive", id="0"),
        pytest.param({"debounce_ms": -1}, "debounce_ms must be positive", id="negative"),
        pytest.param({"writer": "fiber"}, "thread, process, got 'fiber'", id="writer"),
        pytest.param({"logs_max_per_step": 0}, "OTEL_JOBSTEPS_LOGS_MAX_PER_STEP", id="logs"),
    ],
)
def test_a_bad_value_is_refused(given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_environment(dsn=DSN, **given)


def test_zero_debounce_is_allowed() -> None:
    assert Settings.from_environment(dsn=DSN, debounce_ms=0).debounce_ms == 0
