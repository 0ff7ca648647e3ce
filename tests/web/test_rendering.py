"""Pure pieces of the pages: where a value may break, counted nouns, a tag typed either way."""

from __future__ import annotations

import pytest

from otel_jobsteps.errors import ConfigurationError
from otel_jobsteps.query import parse_tag
from otel_jobsteps.web.rendering import LONG_TOKEN, breakable, plural

UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.mark.parametrize(
    ("text", "html"),
    [
        pytest.param("newsletter", "newsletter", id="short-word"),
        pytest.param("x" * (LONG_TOKEN - 1), "x" * (LONG_TOKEN - 1), id="just-short"),
        pytest.param("x" * LONG_TOKEN, f'<span class="long">{"x" * LONG_TOKEN}</span>', id="long"),
        pytest.param(f"id {UUID} ok", f'id <span class="long">{UUID}</span> ok', id="in-text"),
        pytest.param("<b>&", "&lt;b&gt;&amp;", id="escaped"),
        pytest.param(
            "<script>" + "y" * 20, '<span class="long">&lt;script&gt;' + "y" * 20 + "</span>",
            id="long-escaped",
        ),
        pytest.param(None, "None", id="not-text"),
    ],
)  # fmt: skip
def test_only_long_tokens_are_marked_breakable(text: object, html: str) -> None:
    assert str(breakable(text)) == html


def test_counted_nouns() -> None:
    assert [plural("open step", n) for n in (0, 1, 2)] == ["open steps", "open step", "open steps"]


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("customer=acme", ("customer", "acme")),
        ("customer:acme", ("customer", "acme")),
        ("pair=k=v:w", ("pair", "k=v:w")),
        ("pair:k=v:w", ("pair", "k=v:w")),
        ("url=http://x/?q=1", ("url", "http://x/?q=1")),
        ("empty=", ("empty", "")),
    ],
)
def test_a_tag_is_name_equals_value_or_name_colon_value(text: str, tag: tuple[str, str]) -> None:
    assert parse_tag(text) == tag


@pytest.mark.parametrize("text", ["customer", "=acme", ":acme", ""])
def test_a_tag_without_a_name_or_separator_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError, match="NAME=VALUE"):
        parse_tag(text)
