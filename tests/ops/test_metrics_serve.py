"""serve's ``/metrics``: one sample per label set (a job type NULL and "" read the same), and at
most ``--metrics-max-series`` label sets per gauge, the rest added up into ``__other__``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from otel_jobsteps._telemetry.metrics import MAX_SERIES_ENV, OTHER_STEP_KEY
from otel_jobsteps.errors import ConfigurationError
from otel_jobsteps.web import create_app
from otel_jobsteps.web.metrics import gauge_families
from tests.ops.test_prometheus import check_metrics

X = OTHER_STEP_KEY
GAUGES = [("g_open", "open"), ("g_silent", "silent")]
LABELS = ("job_domain", "job_type", "job_step_key")


def samples(families: list[Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    """(name, label values in `LABELS` order) -> value; fails on a label set seen twice."""
    found: dict[tuple[str, tuple[str, ...]], float] = {}
    for family in families:
        for sample in family.samples:
            values = tuple(sample.labels[name] for name in LABELS if name in sample.labels)
            key = (sample.name, values)
            assert key not in found, f"two samples for {key}"
            found[key] = sample.value
    return found


def test_rows_that_read_the_same_are_one_sample() -> None:
    rows = [
        (("render", None, "SAVE"), (2, 1)),
        (("render", "", "SAVE"), (1, 0)),
        (("render", "thumbnail", None), (4, 4)),
        (("render", "thumbnail", ""), (1, 0)),
    ]
    families, folded = gauge_families(GAUGES, LABELS, rows, 10)
    assert samples(families) == {
        ("g_open", ("render", "", "SAVE")): 3,
        ("g_silent", ("render", "", "SAVE")): 1,
        ("g_open", ("render", "thumbnail", "")): 5,
        ("g_silent", ("render", "thumbnail", "")): 4,
    }
    assert folded == 0


@pytest.mark.parametrize("limit", [1, 2, 7])
def test_label_sets_beyond_the_limit_are_added_up_into_one_series(limit: int) -> None:
    rows = [((f"d{i}", "t", "S"), (i + 1, i % 2)) for i in range(limit + 5)]
    families, folded = gauge_families(GAUGES, LABELS, rows, limit)
    found = samples(families)
    opened = {labels: value for (name, labels), value in found.items() if name == "g_open"}

    assert len(opened) == limit
    assert (X, X, X) in opened
    assert folded == 6  # limit + 5 label sets in limit - 1 kept ones and one folded
    assert sum(opened.values()) == sum(open_ for _, (open_, _) in rows)
    silent = sum(value for (name, _), value in found.items() if name == "g_silent")
    assert silent == sum(silent for _, (_, silent) in rows)
    kept = {(f"d{i}", "t", "S") for i in range(limit + 4, 5, -1)}  # the largest
    assert set(opened) - {(X, X, X)} == kept


def test_a_real_other_label_set_takes_the_folded_ones_in() -> None:
    rows = [((X, X, X), (9, 0)), (("a", "t", "S"), (1, 0)), (("b", "t", "S"), (1, 1))]
    families, folded = gauge_families(GAUGES, LABELS, rows, 2)
    assert samples(families) == {
        ("g_open", (X, X, X)): 10,  # one series less would be needed for "__other__"
        ("g_silent", (X, X, X)): 1,
        ("g_open", ("a", "t", "S")): 1,
        ("g_silent", ("a", "t", "S")): 0,
    }
    assert folded == 1


def _open_steps(conn: psycopg.Connection[Any], rows: list[tuple[str, str | None, str]]) -> None:
    """One open step per (domain, job type, step key), a different job each."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
            " step_status, created_at) VALUES (%s, %s, %s, 1, 'STEP', %s, 'RUNNING', now())",
            [(domain, f"job-{n}", job_type, key) for n, (domain, job_type, key) in enumerate(rows)],
        )


def _scrape(dsn: str, **options: Any) -> str:
    with TestClient(create_app(dsn, **options)) as client:
        reply = client.get("/metrics")
    assert reply.status_code == 200
    return reply.text


def _parsed(text: str) -> list[Any]:
    return list(text_string_to_metric_families(text))


def test_a_job_type_null_and_empty_give_one_series(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _open_steps(conn, [("render", None, "SAVE"), ("render", None, "SAVE"), ("render", "", "SAVE")])

    text = _scrape(dsn)

    found = samples(_parsed(text))
    assert found[("otel_jobsteps_open_steps", ("render", "", "SAVE"))] == 3
    assert found[("otel_jobsteps_silent_steps", ("render", "", "SAVE"))] == 0
    assert found[("otel_jobsteps_folded_series", ())] == 0
    names = Counter(name for name, _ in found)
    assert names["otel_jobsteps_open_steps"] == names["otel_jobsteps_silent_steps"] == 1
    check_metrics(text)


def test_serve_folds_label_sets_beyond_its_limit(
    dsn: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [("render", f"type-{i}", "SAVE") for i in range(8)] + [("render", None, "SAVE")] * 2
    _open_steps(conn, rows)
    monkeypatch.setenv(MAX_SERIES_ENV, "4")  # the option wins over the variable

    text = _scrape(dsn, metrics_max_series=3)
    from_environment = _scrape(dsn)

    found = samples(_parsed(text))
    opened = {labels: v for (name, labels), v in found.items() if name.endswith("open_steps")}
    assert opened == {
        ("render", "", "SAVE"): 2,  # the largest is kept
        ("render", "type-0", "SAVE"): 1,  # then by labels, the same at every scrape
        (X, X, X): 7,
    }
    assert found[("otel_jobsteps_folded_series", ())] == 7
    check_metrics(text)
    assert found[("otel_jobsteps_silent_steps", (X, X, X))] == 0
    again = samples(_parsed(from_environment))
    assert sum(name.endswith("open_steps") for name, _ in again) == 4


@pytest.mark.parametrize("raw", ["0", "-1", "many"])
def test_a_bad_limit_in_the_environment_is_refused(
    dsn: str, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(MAX_SERIES_ENV, raw)
    with pytest.raises(ConfigurationError, match="max_series|" + MAX_SERIES_ENV):
        create_app(dsn)
