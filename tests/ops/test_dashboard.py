"""The Grafana dashboard `otel-jobsteps ops dashboard` prints: its structure as Grafana imports
it, and every SQL query run on PostgreSQL with the macros and variables expanded as Grafana's
PostgreSQL data source expands them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from otel_jobsteps.ops import read_ops_file

PROMETHEUS_INPUT = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
POSTGRES_INPUT = {"type": "grafana-postgresql-datasource", "uid": "${DS_POSTGRES}"}
# i24-metrics' names: the OTel metrics as the Prometheus exporter writes them
PROMETHEUS_METRICS = {
    "otel_jobsteps_step_duration_seconds_bucket": {"job_type", "job_step_key", "le"},
    "otel_jobsteps_step_duration_seconds_count": {"job_type", "job_step_key", "job_step_status"},
    "otel_jobsteps_attempts_total": {"job_type", "job_status", "job_reason"},
}

# -- Grafana's expansion, as its PostgreSQL data source does it (backend: sqleng's global
# substitutions, then the macro engine; frontend: template variables) -----------------------

_MACRO = re.compile(r"\$(\w+)\(([^)]*)\)")  # the macro engine's pattern: arguments up to ")"
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _rfc3339_nano(at: datetime) -> str:
    """Go's time.RFC3339Nano of a UTC time: trailing zeros of the fraction dropped."""
    text = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def _format_interval(seconds: float) -> str:
    """gtime.FormatInterval: the largest whole unit."""
    for unit in ("y", "d", "h", "m", "s", "ms"):
        if seconds >= _UNITS[unit]:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return "1ms"


def _parse_interval(text: str) -> float:
    number, unit = re.fullmatch(r"([0-9]+)(ms|s|m|h|d|w|y)", text.strip("'")).groups()  # type: ignore[union-attr]
    return int(number) * _UNITS[unit]


def _go_float(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def expand(
    query: str,
    *,
    start: datetime,
    end: datetime,
    interval_s: float,
    variables: dict[str, Sequence[str]],
) -> str:
    """``query`` as Grafana sends it to PostgreSQL (multi-value variables: each value quoted,
    joined by commas)."""
    for name, values in variables.items():
        rendered = ",".join(_quote_literal(value) for value in values)
        pattern = rf"\$\{{{name}\}}|\${name}\b|\[\[{name}\]\]"
        query = re.sub(pattern, lambda _, text=rendered: text, query)
    query = query.replace("$__interval_ms", str(int(interval_s * 1000)))
    query = query.replace("$__interval", _format_interval(interval_s))

    def macro(match: re.Match[str]) -> str:
        name, arguments = match.group(1), [a.strip() for a in match.group(2).split(",")]
        if name == "__timeGroup" and query[match.end() : match.end() + 1] == ",":
            name = "__timeGroupAlias"  # as Grafana: followed by a comma, it names the column
        window = f"'{_rfc3339_nano(start)}' AND '{_rfc3339_nano(end)}'"
        if name == "__timeFilter":
            return f"{arguments[0]} BETWEEN {window}"
        if name == "__timeFrom":
            return f"'{_rfc3339_nano(start)}'"
        if name == "__timeTo":
            return f"'{_rfc3339_nano(end)}'"
        if name in ("__timeGroup", "__timeGroupAlias"):
            step = _go_float(_parse_interval(arguments[1]))
            grouped = f"floor(extract(epoch from {arguments[0]})/{step})*{step}"
            return grouped + (' AS "time"' if name == "__timeGroupAlias" else "")
        raise AssertionError(f"a macro this test does not know: {name}")

    return _MACRO.sub(macro, query)


def test_expansion_matches_grafanas_own_examples() -> None:
    start = datetime(2017, 4, 21, 5, 1, 17, tzinfo=timezone.utc)
    end = datetime(2017, 4, 21, 5, 6, 17, 500000, tzinfo=timezone.utc)
    query = "$__timeFilter(t) $__timeFrom() $__timeGroup(t, $__interval) $__timeGroup(t, '5m'), x"
    variables = {"host": ["a", "o'b"]}

    expanded = expand(
        query + " IN ($host)", start=start, end=end, interval_s=60, variables=variables
    )

    assert expanded == (
        "t BETWEEN '2017-04-21T05:01:17Z' AND '2017-04-21T05:06:17.5Z' '2017-04-21T05:01:17Z'"
        ' floor(extract(epoch from t)/60)*60 floor(extract(epoch from t)/300)*300 AS "time", x'
        " IN ('a','o''b')"
    )


# -- the dashboard -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    printed = subprocess.run(
        [sys.executable, "-m", "otel_jobsteps.cli", "ops", "dashboard"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert printed == read_ops_file("dashboard.json")
    loaded: dict[str, Any] = json.loads(printed)
    return loaded


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _sql_targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["rawSql"])
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
        if target["datasource"] == POSTGRES_INPUT
    ]


def test_the_dashboard_is_what_grafana_imports(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["schemaVersion"] >= 36  # datasource references by uid
    inputs = {i["name"]: i["pluginId"] for i in dashboard["__inputs"]}
    assert inputs == {"DS_PROMETHEUS": "prometheus", "DS_POSTGRES": "grafana-postgresql-datasource"}
    assert all(i["type"] == "datasource" for i in dashboard["__inputs"])
    panels = list(_panels(dashboard))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in panels:
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"}
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] in (PROMETHEUS_INPUT, POSTGRES_INPUT), panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert ("expr" in target) == (panel["datasource"] == PROMETHEUS_INPUT)
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] in (PROMETHEUS_INPUT, POSTGRES_INPUT)
    # No two panels overlap on the grid.
    cells = [
        (x, y)
        for p in panels
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells))


def test_the_prometheus_panels_use_the_exported_names(dashboard: dict[str, Any]) -> None:
    queries = [
        target["expr"]
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    used = {name for query in queries for name in re.findall(r"otel_jobsteps_\w+", query)}

    assert used == set(PROMETHEUS_METRICS)
    for query in queries:
        for name, labels in PROMETHEUS_METRICS.items():
            if name in query:
                grouped = set(re.findall(r"by \(([^)]*)\)", query)[0].replace(" ", "").split(","))
                assert grouped <= labels | {"le"}, query
    assert any("histogram_quantile(0.95" in q for q in queries)
    assert any("histogram_quantile(0.99" in q for q in queries)


def test_promtool_parses_every_prometheus_query(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """Each query, with Grafana's variables filled in, as a recording rule `promtool` checks."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    queries = [
        target["expr"].replace("$job_type", "thumbnail|render").replace("$__rate_interval", "1m")
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query{n}", "expr": query}
                    for n, query in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(queries)} rules found" in checked.stdout


def _run(conn: psycopg.Connection[Any], query: str, types: Sequence[str]) -> list[tuple[Any, ...]]:
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    expanded = expand(
        query,
        start=now - timedelta(hours=1),
        end=now + timedelta(minutes=1),
        interval_s=60,
        variables={"job_type": types},
    )
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")  # the data source's role needs SELECT only
        return conn.execute(expanded).fetchall()


def test_every_sql_query_runs_on_postgresql(
    dashboard: dict[str, Any], two_attempts: str, conn: psycopg.Connection[Any]
) -> None:
    """The seed story: RENDER completed twice, SAVE failed once then completed; attempt 1
    FAILED, attempt 2 COMPLETED."""
    targets = dict(_sql_targets(dashboard))
    assert set(targets) == {"Slowest steps", "Recent failures", "Attempts per job type"}
    variable = dashboard["templating"]["list"][0]
    types = [row[0] for row in _run(conn, variable["query"], [])]
    assert types == ["thumbnail"]
    hostile = [*types, "o'brien); DROP TABLE job_log; --"]  # a value is a literal, never SQL

    slowest = _run(conn, targets["Slowest steps"], hostile)
    failures = _run(conn, targets["Recent failures"], hostile)
    attempts = _run(conn, targets["Attempts per job type"], hostile)

    assert sorted((r[0], r[1], r[2], r[3]) for r in slowest) == [
        ("thumbnail", "RENDER", 2, 0),
        ("thumbnail", "SAVE", 2, 1),
    ]
    assert [(r[2], r[3], r[4], r[6]) for r in failures] == [("42", 1, "thumbnail", "SAVE")]
    assert failures[0][7]  # the step's message
    per_series: Counter[str] = Counter()
    for at, series, count in attempts:  # the two attempts may fall in two intervals
        assert at % 60 == 0  # the interval's start, in seconds
        per_series[series] += count
    assert per_series == {"thumbnail COMPLETED": 1, "thumbnail FAILED": 1}
    assert conn.execute("SELECT count(*) FROM job_log").fetchone() == (2,)


def test_every_sql_query_can_read_through_an_index(
    dashboard: dict[str, Any], conn: psycopg.Connection[Any]
) -> None:
    """With sequential scans priced out, no plan reads a table whole: each query filters on
    what an index of the read side leads with (the partitioned layout's job_event_archive is
    the children's parent, empty itself)."""
    queries = [query for _, query in _sql_targets(dashboard)]
    queries.append(dashboard["templating"]["list"][0]["query"])
    conn.execute("SET enable_seqscan = off")
    for query in queries:
        plan = [row[0] for row in _run(conn, "EXPLAIN " + query, ["thumbnail"])]
        scans = [line for line in plan if "Seq Scan" in line and "job_event_archive" not in line]
        assert not scans, "\n".join(plan)


def test_a_job_type_not_chosen_is_left_out(
    dashboard: dict[str, Any], two_attempts: str, conn: psycopg.Connection[Any]
) -> None:
    for _, query in _sql_targets(dashboard):
        assert _run(conn, query, ["another type"]) == []
