"""The shipped alert rules: valid for promtool, each one unit-tested by `promtool test rules`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_jobsteps.cli import main
from otel_jobsteps.ops import read_ops_file
from tests.ops.promtool import run_promtool

RULES = Path(__file__).parents[2] / "otel_jobsteps" / "ops" / "alerts.yml"
RULE_TESTS = Path(__file__).with_name("alerts_test.yml")


def test_every_rule_is_valid_and_passes_its_unit_tests() -> None:
    checked = run_promtool("check", "rules", str(RULES))
    tested = run_promtool("test", "rules", str(RULE_TESTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_firing_test() -> None:
    alerts = set(re.findall(r"^\s*- alert: (\w+)$", RULES.read_text(), re.MULTILINE))
    # A firing case: an alertname followed by a non-empty list of expected alerts.
    firing = set(
        re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n", RULE_TESTS.read_text(), re.MULTILINE)
    )
    assert len(alerts) == 6
    assert alerts == firing


def test_ops_alerts_prints_the_shipped_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "alerts"]) == 0
    printed = capsys.readouterr().out
    assert printed == read_ops_file("alerts.yml") == RULES.read_text()
