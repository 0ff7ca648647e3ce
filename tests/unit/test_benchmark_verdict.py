"""`python -m benchmarks` exits 0 on a missed target unless --strict; a crash always fails."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import CRASHED, exit_code
from benchmarks.common import Row

MET = Row("1", "hot path", "1 µs", verdict="PASS")
MISSED = Row("2", "throughput", "10 steps/s", verdict="FAIL")
BROKEN = Row("-", "latency benchmark crashed", "OSError: gone", verdict=CRASHED)


@pytest.mark.parametrize(
    ("rows", "strict", "code"),
    [
        pytest.param([MET], False, 0, id="all-met"),
        pytest.param([MET, MISSED], False, 0, id="missed-reported"),
        pytest.param([MET, MISSED], True, 1, id="missed-strict"),
        pytest.param([MET, BROKEN], False, 1, id="crashed"),
    ],
)
def test_exit_code(
    rows: list[Row], strict: bool, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(rows, strict=strict) == code
    assert "targets: 1 met" in capsys.readouterr().out
