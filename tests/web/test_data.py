"""Pure helpers of the web page's reads (no database)."""

from __future__ import annotations

import pytest

from otel_jobsteps.web.data import after_prefix


@pytest.mark.parametrize(
    ("prefix", "upper"),
    [
        pytest.param("job-", "job.", id="ascii"),
        pytest.param("naïv", "naïw", id="accent"),
        pytest.param("a\ud7ff", "a\ue000", id="skips-surrogates"),
        pytest.param("a\U0010ffff", "b", id="last-code-point"),
        pytest.param("\U0010ffff", "\U0010ffff" * 513, id="above-every-id"),
    ],
)
def test_the_upper_bound_of_a_prefix_search(prefix: str, upper: str) -> None:
    assert after_prefix(prefix) == upper
