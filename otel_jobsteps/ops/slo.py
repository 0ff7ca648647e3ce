"""Step SLOs as Prometheus rules: objectives read from YAML become recording rules and the
multiwindow, multi-burn-rate alerts of the Google SRE workbook, over the exported metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .._telemetry.metrics import DURATION_BUCKETS_S
from ..errors import ConfigurationError, printable

__all__ = ["BURN_WINDOWS", "Objective", "read_objectives", "slo_rules", "slo_rules_yaml"]

STEPS = "otel_jobsteps_step_duration_seconds"
ATTEMPTS = "otel_jobsteps_attempts_total"
ERROR_RATIO = "otel_jobsteps:slo_errors:ratio_rate"
BUDGET_REMAINING = "otel_jobsteps:slo_error_budget_remaining:ratio"
# The workbook's alerts: (name, long window, short window, burn rate, severity). At 14.4x a
# 30-day budget loses 2 % in the hour; at 6x, 5 % in six hours.
BURN_WINDOWS = (
    ("JobStepSLOFastBurn", "1h", "5m", 14.4, "critical"),
    ("JobStepSLOSlowBurn", "6h", "30m", 6.0, "warning"),
)
# A p95 objective: 95 % of the step's runs end within the threshold.
P95_TARGET = 0.95
_KEYS = ("domain", "job_type", "step_key", "success_ratio", "p95_seconds", "window")
_WINDOW = re.compile(r"([1-9][0-9]*)([dw])")
_MIN_RATIO = 1 - 1 / BURN_WINDOWS[0][3]  # below it a fast burn needs more than 100 % errors
_MAX_WINDOW_DAYS = 366


@dataclass(frozen=True)
class Objective:
    """One objective: the success ratio (``kind="success_ratio"``) of a job type's attempts
    or of one step, or the share of a step's runs within ``p95_seconds`` (``kind="p95_seconds"``).
    """

    job_type: str
    step_key: str | None
    domain: str | None
    kind: str
    target: float  # the good share: success_ratio, or 0.95 for p95_seconds
    threshold_s: float | None  # p95_seconds
    window: str  # the SLO's period, e.g. 28d


def _bounds() -> str:
    return ", ".join(f"{bound:g}" for bound in DURATION_BUCKETS_S)


def _entry_name(index: int, entry: Mapping[str, Any]) -> str:
    parts = [f"{key} {printable(str(entry[key]))}" for key in _KEYS[:3] if key in entry]
    return f"objective {index}" + (f" ({', '.join(parts)})" if parts else "")


def _text(entry: Mapping[str, Any], key: str, required: bool) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} must be a non-empty string")
    return value


def _number(entry: Mapping[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, not {printable(repr(value))}")
    return float(value)


def _window(entry: Mapping[str, Any]) -> str:
    value = entry.get("window")
    match = _WINDOW.fullmatch(value) if isinstance(value, str) else None
    days = int(match[1]) * (7 if match[2] == "w" else 1) if match else 0
    if not 1 <= days <= _MAX_WINDOW_DAYS:
        raise ValueError(
            f"window must be days or weeks from 1d to {_MAX_WINDOW_DAYS}d, like 28d or 4w "
            f"(got {printable(repr(value))})"
        )
    return str(value)


def _objectives_of(entry: Mapping[str, Any]) -> list[Objective]:
    unknown = sorted(str(key) for key in entry if key not in _KEYS)
    if unknown:
        raise ValueError(f"unknown key {printable(unknown[0])!r} (known: {', '.join(_KEYS)})")
    job_type = _text(entry, "job_type", required=True)
    assert job_type is not None
    step_key = _text(entry, "step_key", required=False)
    domain = _text(entry, "domain", required=False)
    window = _window(entry)
    ratio = _number(entry, "success_ratio")
    p95 = _number(entry, "p95_seconds")
    if ratio is None and p95 is None:
        raise ValueError("give success_ratio, p95_seconds or both")
    found = []
    if ratio is not None:
        if not _MIN_RATIO < ratio < 1:
            raise ValueError(
                f"success_ratio {ratio:g} must be above {_MIN_RATIO:.4f} and below 1 (at lower "
                f"ones a {BURN_WINDOWS[0][3]:g}x burn needs more than 100 % errors)"
            )
        found.append(Objective(job_type, step_key, domain, "success_ratio", ratio, None, window))
    if p95 is not None:
        if step_key is None:
            raise ValueError("p95_seconds needs a step_key (durations are measured per step)")
        if p95 not in DURATION_BUCKETS_S:
            raise ValueError(
                f"p95_seconds {p95:g} is not a bucket boundary of {STEPS}; available: {_bounds()}"
            )
        found.append(Objective(job_type, step_key, domain, "p95_seconds", P95_TARGET, p95, window))
    return found


def read_objectives(text: str, source: str = "objectives") -> list[Objective]:
    """The objectives of a YAML document (``objectives:``, a list of entries); a
    `ConfigurationError` names the entry and its problem in one line."""
    source = printable(source)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ConfigurationError(f"{source}: not YAML{where}: {problem}") from None
    entries = document.get("objectives") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f"{source}: expected 'objectives:' with a list of entries")
    objectives: list[Objective] = []
    for index, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{source}: objective {index}: expected a mapping")
        try:
            found = _objectives_of(entry)
        except ValueError as error:
            raise ConfigurationError(f"{source}: {_entry_name(index, entry)}: {error}") from None
        for objective in found:
            clash = next((o for o in objectives if _overlap(o, objective)), None)
            if clash is not None:
                raise ConfigurationError(
                    f"{source}: {_entry_name(index, entry)}: its {objective.kind} overlaps "
                    f"objective {objectives.index(clash) + 1}'s (same job_type and step_key, "
                    "domains that meet)"
                )
        objectives.extend(found)
    return objectives


def _overlap(a: Objective, b: Objective) -> bool:
    """Two objectives whose recorded series would be the same ones."""
    same = (a.job_type, a.step_key, a.kind) == (b.job_type, b.step_key, b.kind)
    return same and (a.domain is None or b.domain is None or a.domain == b.domain)


def _string(value: str) -> str:
    """A PromQL string literal (its escapes are Go's, which JSON's are a subset of)."""
    return json.dumps(value)


def _matchers(objective: Objective, metric_labels: bool) -> str:
    """Label matchers of the objective: on the exported metrics, or on the recorded series
    (where a job-level objective also asks for no step key)."""
    pairs = [("job_type", objective.job_type)]
    if objective.domain is not None:
        pairs.append(("job_domain", objective.domain))
    if objective.step_key is not None or not metric_labels:
        pairs.append(("job_step_key", objective.step_key or ""))
    if not metric_labels:
        pairs.append(("slo", objective.kind))
    return ",".join(f"{name}={_string(value)}" for name, value in pairs)


def _le(threshold: float) -> str:
    """The bucket's ``le`` matcher: written 30.0 by Python exporters and Prometheus 3, 30 by
    the OpenTelemetry Collector's exporter."""
    text = repr(threshold)
    if text.endswith(".0"):
        return f'le=~"{text[:-2]}|{text[:-2]}\\\\.0"'
    return f"le={_string(text)}"


def _error_ratio(objective: Objective, window: str) -> str:
    """The share of bad events over ``window``, per domain, job type (and step)."""
    labels = _matchers(objective, metric_labels=True)
    by = "job_domain, job_type" + (", job_step_key" if objective.step_key is not None else "")

    def rate(metric: str, extra: str = "") -> str:
        return f"sum by ({by}) (rate({metric}{{{labels}{extra}}}[{window}]))"

    ran = ',job_step_status!="SKIPPED"'  # a skipped step did not run: neither good nor bad
    if objective.kind == "p95_seconds":
        assert objective.threshold_s is not None
        within = rate(f"{STEPS}_bucket", ran + "," + _le(objective.threshold_s))
        return f"1 - (\n  {within}\n  /\n  {rate(f'{STEPS}_count', ran)}\n)"
    if objective.step_key is None:
        failed, total = rate(ATTEMPTS, ',job_status="FAILED"'), rate(ATTEMPTS)
    else:
        failed = rate(f"{STEPS}_count", ',job_step_status="FAILED"')
        total = rate(f"{STEPS}_count", ran)
    return f"{failed}\n/\n{total}"


def _what(objective: Objective) -> str:
    if objective.kind == "p95_seconds":
        return f"p95 within {objective.threshold_s:g}s"
    return f"success ratio {objective.target:g}"


def _group(objective: Objective) -> dict[str, Any]:
    series = _matchers(objective, metric_labels=False)
    # The objective's labels, also written as the rules' own: two objectives' rules then
    # differ in their labels, as promtool asks of rules of one name.
    static = {"slo": objective.kind, "job_type": objective.job_type}
    if objective.step_key is not None:
        static["job_step_key"] = objective.step_key
    if objective.domain is not None:
        static["job_domain"] = objective.domain
    budget = 1 - objective.target
    windows = sorted({w for _, long, short, _, _ in BURN_WINDOWS for w in (long, short)})
    rules: list[dict[str, Any]] = [
        {"record": ERROR_RATIO + w, "expr": _error_ratio(objective, w), "labels": static}
        for w in (*windows, objective.window)
    ]
    rules.append(
        {
            "record": BUDGET_REMAINING,
            "expr": f"1 - {ERROR_RATIO}{objective.window}{{{series}}} / {budget:.6g}",
            "labels": {**static, "window": objective.window},
        }
    )
    step = "{{ $labels.job_step_key }} steps of " if objective.step_key else ""
    for alert, long, short, burn, severity in BURN_WINDOWS:
        limit = f"({burn:g} * {budget:.6g})"
        rules.append(
            {
                "alert": alert,
                "expr": f"{ERROR_RATIO}{long}{{{series}}} > {limit}\n"
                f"and\n{ERROR_RATIO}{short}{{{series}}} > {limit}",
                "labels": {"severity": severity, **static},
                "annotations": {
                    "summary": f"{step}{{{{ $labels.job_type }}}} burn their "
                    f"{objective.window} error budget {burn:g}x",
                    "description": f"{step}{{{{ $labels.job_type }}}} jobs in "
                    f"{{{{ $labels.job_domain }}}} ({_what(objective)} over "
                    f"{objective.window}): {{{{ $value | humanizePercentage }}}} bad over "
                    f"{long}, and still over {short}.",
                },
            }
        )
    name = "/".join(p for p in (objective.domain, objective.job_type, objective.step_key) if p)
    return {"name": f"otel_jobsteps_slo:{name}:{objective.kind}", "rules": rules}


def slo_rules(objectives: list[Objective]) -> dict[str, Any]:
    """Prometheus rule groups (a ``rule_files`` document): one group per objective."""
    return {"groups": [_group(objective) for objective in objectives]}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, as people write them; no
    anchors for repeated values."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text_block(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text_block)


def slo_rules_yaml(text: str, source: str = "objectives") -> str:
    """The rules of the objectives in ``text`` as YAML for Prometheus's ``rule_files``."""
    rules = slo_rules(read_objectives(text, source))
    header = f"# Step SLO rules generated by `otel-jobsteps ops slo` from {printable(source)}.\n"
    return header + yaml.dump(rules, Dumper=_Dumper, sort_keys=False, width=1 << 16)
