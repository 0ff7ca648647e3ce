"""The sugar depends on attribute names only: importing it loads none of the write path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

WRITE_PATH = ("psycopg", "opentelemetry.sdk", "otel_jobsteps.processor", "otel_jobsteps._pg.store")


@pytest.mark.parametrize("module", ["otel_jobsteps.context", "otel_jobsteps"])
def test_importing_the_sugar_loads_no_write_path(module: str) -> None:
    script = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.check_output([sys.executable, "-c", script]))
    assert [name for name in loaded if name.startswith(WRITE_PATH)] == []


def test_the_package_still_offers_the_write_path() -> None:
    import otel_jobsteps
    from otel_jobsteps.processor import JobStepsProcessor

    assert otel_jobsteps.JobStepsProcessor is JobStepsProcessor
    assert all(getattr(otel_jobsteps, name) is not None for name in otel_jobsteps.__all__)
    assert set(otel_jobsteps.__all__) <= set(dir(otel_jobsteps))
    with pytest.raises(AttributeError):
        _ = otel_jobsteps.no_such_name  # type: ignore[attr-defined]
