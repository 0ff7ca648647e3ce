"""New rows travel as one JSON array; each detail in it must say what `encode_detail` says,
whether it rides as an object (the fast path) or as the JSON text of its row-by-row encoding."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from otel_jobsteps._core.batch import EventRow
from otel_jobsteps._core.detail import encode_detail
from otel_jobsteps._pg.store import rows_json

DETAILS: list[Any] = [
    None,
    {},
    {"done": 3, "total": 3},
    {"nan": math.nan},
    {"nul": "a\x00b"},
    {"big": "x" * 5000},
    {"odd": object()},
    {"nested": {"list": [1, 2.5, True, None]}},
    {"lone": "a\ud800b", "pair": "\U0001f680"},
    {"huge": 10**5000},
    {"medium": "y" * 600},
]


def _row(number: int, detail: Any) -> EventRow:
    return EventRow(
        "d", f"job-{number}", None, 1, "STEP", "A", "COMPLETED", detail, None, "0" * 32,
        f"{number:016x}", "exec", 1_000_000 + number, 2_000_000 + number,
    )  # fmt: skip


def _detail_of(element: Any) -> Any:
    return json.loads(element) if isinstance(element, str) else element


@pytest.mark.parametrize("max_bytes", [64 * 1024, 1000, 40])
@pytest.mark.parametrize("rows", [1, 3, 300], ids=lambda n: f"{n}-rows")
def test_every_detail_reads_as_encode_detail_writes_it(max_bytes: int, rows: int) -> None:
    details = [DETAILS[n % len(DETAILS)] for n in range(rows)]
    decoded = json.loads(rows_json([_row(n, d) for n, d in enumerate(details)], max_bytes))
    assert len(decoded) == rows
    for number, (row, detail) in enumerate(zip(decoded, details, strict=True)):
        expected = encode_detail(detail, max_bytes)
        assert _detail_of(row[7]) == (None if expected is None else json.loads(expected))
        assert row[:7] == ["d", f"job-{number}", None, 1, "STEP", "A", "COMPLETED"]
        assert row[8:] == [
            None,
            "0" * 32,
            f"{number:016x}",
            "exec",
            1_000_000 + number,
            2_000_000 + number,
        ]


def test_plain_details_ride_as_objects() -> None:
    decoded = json.loads(rows_json([_row(0, {"done": 1})], 64 * 1024))
    assert decoded[0][7] == {"done": 1}


def test_even_rows_too_long_for_one_chunk_still_ride_as_objects() -> None:
    """128 rows of 600-byte details exceed 64 KiB together, not one by one."""
    decoded = json.loads(rows_json([_row(n, {"pad": "y" * 600}) for n in range(300)], 64 * 1024))
    assert all(row[7] == {"pad": "y" * 600} for row in decoded)
