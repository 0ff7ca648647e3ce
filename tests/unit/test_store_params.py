"""Details travel as JSON text, encoded together and cut apart (the fast path) or one by one;
either way each must say what `encode_detail` says."""

from __future__ import annotations

import math
from typing import Any

import pytest

from otel_jobsteps._core.batch import EventRow
from otel_jobsteps._core.detail import encode_detail
from otel_jobsteps._pg.store import detail_texts, statement_params

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


def test_new_rows_travel_as_one_array_per_field() -> None:
    details = [DETAILS[n % len(DETAILS)] for n in range(30)]
    params = statement_params([_row(n, d) for n, d in enumerate(details)], 1000, derived=True)
    assert params["derived"] is True
    assert params["detail"] == [encode_detail(d, 1000) for d in details]
    assert params["job_id"] == [f"job-{n}" for n in range(30)]
    assert params["ended_us"] == [2_000_000 + n for n in range(30)]


@pytest.mark.parametrize("max_bytes", [64 * 1024, 1000, 40])
@pytest.mark.parametrize("rows", [1, 3, 300], ids=lambda n: f"{n}-rows")
@pytest.mark.parametrize("prefix", ["", "\x01"])
def test_detail_texts_say_what_encode_detail_says(max_bytes: int, rows: int, prefix: str) -> None:
    """COPYed rows take their details from one encoding cut at separators, or row by row."""
    details = [DETAILS[n % len(DETAILS)] for n in range(rows)]
    expected = [encode_detail(d, max_bytes) for d in details]
    assert detail_texts(details, max_bytes, prefix) == [
        None if text is None else prefix + text for text in expected
    ]


@pytest.mark.parametrize(
    "details",
    [
        [{"a": "\x00"}, {"b": 1}],  # a NUL of a detail beside the separators
        [{"\\u0000": 1}, {"b": 1}],  # the separator's escape as text
        [{"a": [{"x": 1}, {"y": 2}]}, None, {}],  # commas and braces between elements
    ],
)
def test_detail_texts_never_cut_a_detail(details: list[Any]) -> None:
    assert detail_texts(details, 64 * 1024) == [encode_detail(d) for d in details]
