"""Step SLOs: `otel-jobsteps ops slo FILE` prints rules promtool accepts, whose burn-rate alerts
fire on a burning series and stay quiet on a healthy one; bad objectives exit 2 in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_jobsteps.cli import EXIT_ERROR, main
from otel_jobsteps.ops import read_ops_file
from otel_jobsteps.ops.slo import read_objectives
from tests.ops.promtool import run_promtool

STEPS = "otel_jobsteps_step_duration_seconds"


def _rules(tmp_path: Path, objectives: str, capsys: pytest.CaptureFixture[str]) -> Path:
    """The rules `ops slo` prints for ``objectives``, saved next to them."""
    source = tmp_path / "slo.yml"
    source.write_text(objectives)
    assert main(["ops", "slo", str(source)]) == 0
    rules = tmp_path / "slo.rules.yml"
    rules.write_text(capsys.readouterr().out)
    return rules


def _promtool_test(rules: Path, tests: list[dict[str, Any]]) -> None:
    """Run ``tests`` (promtool's test groups) over ``rules``; JSON is YAML to promtool."""
    spec = rules.with_name("slo_test.yml")
    spec.write_text(
        json.dumps({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests})
    )
    result = run_promtool("test", "rules", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    text = ",".join(f'{name}="{value}"' for name, value in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


# The two alerts: name, severity, burn rate, long and short windows.
FAST = ("JobStepSLOFastBurn", "critical", "14.4x", "1h", "5m")
SLOW = ("JobStepSLOSlowBurn", "warning", "6x", "6h", "30m")


def _expect(
    alert: tuple[str, ...], at: str, objective: str, *fired: tuple[dict[str, str], str]
) -> dict[str, Any]:
    """promtool's expectation: ``alert`` at ``at`` fired for these (labels, bad share) only;
    ``objective`` is the description's "success ratio 0.999 over 28d"."""
    name, severity, burn, long, short = alert
    window = objective.rsplit(" ", 1)[1]
    expected = []
    for labels, bad in fired:
        key = labels.get("job_step_key")
        subject = f"{key} steps of {labels['job_type']}" if key else labels["job_type"]
        summary = f"{subject} burn their {window} error budget {burn}"
        description = (
            f"{subject} jobs in {labels['job_domain']} ({objective}): {bad} bad over {long}, "
            f"and still over {short}."
        )
        expected.append(
            {
                "exp_labels": {**labels, "severity": severity},
                "exp_annotations": {"summary": summary, "description": description},
            }
        )
    return {"eval_time": at, "alertname": name, "exp_alerts": expected}


def test_the_example_objectives_give_valid_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _rules(tmp_path, read_ops_file("slo.example.yml"), capsys)
    checked = run_promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 32 rules found" in checked.stdout  # 3 groups of 8, and 8 for the p95


SAVE = {"job_domain": "render", "job_type": "thumbnail", "job_step_key": "SAVE"}
STEP_OBJECTIVE = """
objectives:
  - job_type: thumbnail
    step_key: SAVE
    success_ratio: 0.999
    window: 28d
"""


def test_a_burning_step_fires_the_fast_alert_and_a_healthy_one_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _rules(tmp_path, STEP_OBJECTIVE, capsys)
    healthy = {**SAVE, "job_domain": "print"}
    labels = {**SAVE, "slo": "success_ratio"}
    objective = "success ratio 0.999 over 28d"
    _promtool_test(
        rules,
        [
            {
                "interval": "1m",
                "input_series": [
                    # render: 2 of 10 runs a minute fail (20 % > 14.4 x 0.1 %); print: none.
                    _series(f"{STEPS}_count", "0+2x90", **SAVE, job_step_status="FAILED"),
                    _series(f"{STEPS}_count", "0+8x90", **SAVE, job_step_status="COMPLETED"),
                    _series(f"{STEPS}_count", "0+0x90", **healthy, job_step_status="FAILED"),
                    _series(f"{STEPS}_count", "0+10x90", **healthy, job_step_status="COMPLETED"),
                ],
                "alert_rule_test": [
                    _expect(FAST, "30m", objective, (labels, "20%")),
                    _expect(SLOW, "30m", objective, (labels, "20%")),
                ],
            },
            {
                "interval": "1m",
                "input_series": [
                    # 1 in 100 fails: 1 % burns 6x (0.6 %) but not 14.4x (1.44 %).
                    _series(f"{STEPS}_count", "0+1x90", **SAVE, job_step_status="FAILED"),
                    _series(f"{STEPS}_count", "0+99x90", **SAVE, job_step_status="COMPLETED"),
                ],
                "alert_rule_test": [
                    _expect(FAST, "60m", objective),
                    _expect(SLOW, "60m", objective, (labels, "1%")),
                ],
            },
        ],
    )


def test_a_p95_objective_counts_the_runs_above_its_bucket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _rules(
        tmp_path,
        "objectives:\n  - {job_type: thumbnail, step_key: SAVE, p95_seconds: 30, window: 4w}\n",
        capsys,
    )
    fast = {**SAVE, "job_domain": "print"}
    slow_too = {**SAVE, "job_domain": "batch"}
    _promtool_test(
        rules,
        [
            {
                "interval": "1m",
                "input_series": [
                    # render: 8 of 10 runs a minute over 30 s (80 % > 14.4 x 5 %), le as
                    # Python writes it; batch the same, le as the Collector writes it;
                    # print: 1 of 100 over. Other buckets are not read.
                    _series(f"{STEPS}_bucket", "0+2x40", **SAVE, le="30.0"),
                    _series(f"{STEPS}_bucket", "0+9x40", **SAVE, le="60.0"),
                    _series(f"{STEPS}_count", "0+10x40", **SAVE),
                    _series(f"{STEPS}_bucket", "0+2x40", **slow_too, le="30"),
                    _series(f"{STEPS}_count", "0+10x40", **slow_too),
                    _series(f"{STEPS}_bucket", "0+99x40", **fast, le="30"),
                    _series(f"{STEPS}_count", "0+100x40", **fast),
                ],
                "alert_rule_test": [
                    _expect(
                        FAST,
                        "20m",
                        "p95 within 30s over 4w",
                        *(({**labels, "slo": "p95_seconds"}, "80%") for labels in (slow_too, SAVE)),
                    )
                ],
            }
        ],
    )


def test_a_job_type_objective_reads_the_attempts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _rules(
        tmp_path,
        "objectives:\n  - {job_type: thumbnail, success_ratio: 0.99, window: 30d}\n",
        capsys,
    )
    job = {"job_domain": "render", "job_type": "thumbnail"}
    attempts = "otel_jobsteps_attempts_total"
    _promtool_test(
        rules,
        [
            {
                "interval": "1m",
                "input_series": [
                    # 1 of 4 attempts fails: 25 % > 14.4 x 1 %.
                    _series(attempts, "0+1x40", **job, job_status="FAILED", job_reason="error"),
                    _series(attempts, "0+3x40", **job, job_status="COMPLETED", job_reason=""),
                ],
                "alert_rule_test": [
                    _expect(
                        FAST,
                        "20m",
                        "success ratio 0.99 over 30d",
                        ({**job, "slo": "success_ratio"}, "25%"),
                    )
                ],
            }
        ],
    )


def test_hostile_names_stay_inside_their_label_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _rules(
        tmp_path,
        'objectives:\n  - {job_type: "a\\"} or vector(1) #\\n", step_key: "b\\\\", '
        "success_ratio: 0.999, window: 1d}\n",
        capsys,
    )
    checked = run_promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'job_type="a\\"} or vector(1) #\\n"' in rules.read_text()


GOOD = "job_type: thumbnail, step_key: SAVE, window: 28d"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "objectives: [", "not YAML at line 1: expected the node content", id="not-yaml"
        ),
        pytest.param("jobs: []", "expected 'objectives:' with a list", id="no-objectives"),
        pytest.param("objectives: [3]", "objective 1: expected a mapping", id="not-a-mapping"),
        pytest.param(
            f"objectives: [{{{GOOD}, sucess_ratio: 0.99}}]",
            "objective 1 (job_type thumbnail, step_key SAVE): unknown key 'sucess_ratio'",
            id="unknown-key",
        ),
        pytest.param(
            "objectives: [{success_ratio: 0.99, window: 28d}]",
            "objective 1: job_type must be a non-empty string",
            id="no-job-type",
        ),
        pytest.param(
            "objectives: [{job_type: thumbnail, success_ratio: 0.99}]",
            "window must be days or weeks from 1d to 366d, like 28d or 4w (got None)",
            id="no-window",
        ),
        pytest.param(
            "objectives: [{job_type: thumbnail, success_ratio: 0.99, window: 6h}]",
            "window must be days or weeks",
            id="window-in-hours",
        ),
        pytest.param(
            f"objectives: [{{{GOOD}}}]", "give success_ratio, p95_seconds or both", id="neither"
        ),
        pytest.param(
            f"objectives: [{{{GOOD}, success_ratio: 0.9}}]",
            "success_ratio 0.9 must be above 0.9306 and below 1",
            id="ratio-too-low",
        ),
        pytest.param(
            f"objectives: [{{{GOOD}, success_ratio: 1}}]",
            "success_ratio 1 must be above",
            id="ratio-one",
        ),
        pytest.param(
            f"objectives: [{{{GOOD}, success_ratio: true}}]",
            "success_ratio must be a number, not True",
            id="ratio-bool",
        ),
        pytest.param(
            "objectives: [{job_type: thumbnail, p95_seconds: 5, window: 28d}]",
            "p95_seconds needs a step_key",
            id="p95-of-a-job",
        ),
        pytest.param(
            f"objectives: [{{{GOOD}, p95_seconds: 20}}]",
            "p95_seconds 20 is not a bucket boundary of otel_jobsteps_step_duration_seconds; "
            "available: 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, "
            "600, 1800, 3600",
            id="p95-between-buckets",
        ),
        pytest.param(
            f"objectives: [{{{GOOD}, p95_seconds: 5}}, {{domain: render, {GOOD}, "
            "success_ratio: 0.99, p95_seconds: 10}]",
            "objective 2 (domain render, job_type thumbnail, step_key SAVE): its p95_seconds "
            "overlaps objective 1's",
            id="overlap",
        ),
    ],
)
def test_bad_objectives_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    source = tmp_path / "slo.yml"
    source.write_text(text)
    assert main(["ops", "slo", str(source)]) == EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"otel-jobsteps: error: {source}: ")
    assert message in captured.err


def test_objectives_in_other_domains_do_not_overlap() -> None:
    text = (
        f"objectives: [{{domain: render, {GOOD}, success_ratio: 0.99}}, "
        f"{{domain: print, {GOOD}, success_ratio: 0.999}}]"
    )
    assert [o.domain for o in read_objectives(text)] == ["render", "print"]


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "slo", str(tmp_path / "absent.yml")]) == EXIT_ERROR
    assert "cannot read" in capsys.readouterr().err
