"""The real promtool (Debian's prometheus package): skipped when missing, failed under CI."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

REQUIRE_PROMTOOL = bool(os.environ.get("OTEL_JOBSTEPS_REQUIRE_PROMTOOL"))


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        (pytest.fail if REQUIRE_PROMTOOL else pytest.skip)("promtool is not installed")
    return str(found)


def run_promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
