"""The try count an adapter reads back from its broker: ASCII digits only, never an exception."""

from __future__ import annotations

import pytest

from otel_jobsteps.integrations._common import try_number


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(b"3", 3, id="bytes"),
        pytest.param("12", 12, id="str"),
        pytest.param("²", None, id="superscript-two"),
        pytest.param("٣".encode(), None, id="arabic-indic-digit-bytes"),
        pytest.param("٣", None, id="arabic-indic-digit"),
        pytest.param("", None, id="empty"),
        pytest.param("-1", None, id="sign"),
        pytest.param(None, None, id="no-mark"),
        pytest.param(7, None, id="not-text"),
    ],
)
def test_try_number(value: object, expected: int | None) -> None:
    assert try_number(value) == expected
