"""Selecting dialects (``all``, ``none``, a comma list, the default) and trying them in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from otel_jobsteps._core import dialects
from otel_jobsteps._core.dialects import (
    DEFAULT_DIALECTS,
    DIALECT_NAMES,
    Dialect,
    Dialects,
    select_dialects,
)
from otel_jobsteps._core.dialects.base import KIND_CONSUMER, KIND_INTERNAL, with_defaults
from otel_jobsteps._core.facts import SpanFacts
from otel_jobsteps.errors import ConfigurationError


def _fake(name: str) -> Dialect:
    """A dialect claiming CONSUMER spans named ``<name>...``; its jobs get job.type = name."""

    def may_start_job(span_name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
        return kind == KIND_CONSUMER and span_name.startswith(name)

    def recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
        return [with_defaults(unit[0], {"job.type": name}), *unit[1:]]

    return Dialect(name, "tests", may_start_job, recognise)


@pytest.fixture
def every_dialect_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dialects, "_DIALECTS", {name: _fake(name) for name in DIALECT_NAMES})


def _span(name: str, span_id: int = 1, parent: int = 0, **attributes: Any) -> SpanFacts:
    return SpanFacts(1, span_id, parent, name, 10, 20, attributes, kind=KIND_CONSUMER)


@pytest.mark.usefixtures("every_dialect_written")
@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param(None, DEFAULT_DIALECTS, id="default"),
        pytest.param("", DEFAULT_DIALECTS, id="blank-is-default"),
        pytest.param("all", DIALECT_NAMES, id="all"),
        pytest.param("none", (), id="none"),
        pytest.param("messaging, celery", ("celery", "messaging"), id="list-in-trying-order"),
        pytest.param(["temporal", "bullmq"], ("bullmq", "temporal"), id="sequence"),
        pytest.param("genai,,genai", ("genai",), id="repeats-and-gaps"),
    ],
)
def test_select(text: str | list[str] | None, names: tuple[str, ...]) -> None:
    assert select_dialects(text).names == names


@pytest.mark.parametrize("text", ["celery,rabbit", "ALL", "all,celery", "none,celery"])
def test_an_unknown_name_names_the_known_ones(text: str) -> None:
    with pytest.raises(ConfigurationError, match="use all, none or a comma list of bullmq,"):
        select_dialects(text)


def test_there_are_eleven_and_the_default_leaves_out_messaging() -> None:
    assert len(DIALECT_NAMES) == 11
    assert set(DIALECT_NAMES) - set(DEFAULT_DIALECTS) == {"messaging"}
    # specific before generic: a Celery run is a CONSUMER span with messaging.* attributes too
    assert DIALECT_NAMES.index("celery") < DIALECT_NAMES.index("messaging")


def test_every_name_has_its_module() -> None:
    assert select_dialects("all").names == DIALECT_NAMES


def test_a_dialect_is_asked_only_about_the_span_kinds_it_names() -> None:
    asked: list[int] = []

    def may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
        asked.append(kind)
        return True

    consumer = Dialect("x", "tests", may_start_job, list, frozenset({KIND_CONSUMER}))
    chosen = Dialects([consumer])
    assert chosen.may_start_job("a", KIND_INTERNAL, {}) is None
    assert chosen.may_start_job("a", KIND_CONSUMER, {}) is consumer
    assert chosen.may_start_job("a", 99, {}) is consumer  # a kind no one knows: all are asked
    assert asked == [KIND_CONSUMER, 99]


@pytest.mark.usefixtures("every_dialect_written")
def test_the_first_selected_dialect_that_claims_the_span_wins() -> None:
    chosen = select_dialects("all")
    found = chosen.may_start_job("celery run", KIND_CONSUMER, {})
    assert found is not None
    assert found.name == "celery"
    assert chosen.may_start_job("celery run", KIND_INTERNAL, {}) is None
    assert select_dialects("none").may_start_job("celery run", KIND_CONSUMER, {}) is None


@pytest.mark.usefixtures("every_dialect_written")
def test_recognise_goes_to_the_dialect_claiming_the_root() -> None:
    root, child = _span("oban job"), _span("step", 2, 1)
    recognised = select_dialects("all").recognise([root, child])
    assert recognised[0].attributes == {"job.type": "oban"}
    assert recognised[1] is child
    assert select_dialects("none").recognise([root, child]) == [root, child]


@pytest.mark.usefixtures("every_dialect_written")
def test_a_unit_holding_the_codes_own_job_is_left_alone() -> None:
    root, own_job = _span("celery run"), _span("job", 2, 1, **{"job.id": "7"})
    assert select_dialects("all").recognise([root, own_job]) == [root, own_job]


@pytest.mark.usefixtures("every_dialect_written")
def test_the_codes_own_attributes_win() -> None:
    root = _span("celery run", **{"job.type": "mine"})
    (recognised,) = select_dialects("all").recognise([root])
    assert recognised is root


def test_with_defaults_adds_only_what_is_missing() -> None:
    span = _span("x", **{"job.id": "mine"})
    changed = with_defaults(span, {"job.id": "theirs", "job.attempt": 2, "job.type": None})
    assert changed.attributes == {"job.id": "mine", "job.attempt": 2}
    assert with_defaults(span, {"job.id": "theirs"}) is span
    assert with_defaults(span, {}, error=True) == replace(span, error=True)


def test_an_empty_selection_is_false() -> None:
    assert not Dialects([])
