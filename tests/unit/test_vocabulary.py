"""The SQL spells only the vocabulary's words for types, statuses and reasons."""

from __future__ import annotations

import re
from pathlib import Path

import otel_jobsteps
from otel_jobsteps._core import vocabulary

SQL_FILES = sorted(Path(otel_jobsteps.__file__).parent.glob("**/*.sql"))
# A quoted word compared with, or written into, a column that holds the vocabulary.
COLUMNS = r"(?:type|step_status|status|message|reason)"
WORD = r"'([A-Za-z_]+)'"
COMPARED = re.compile(rf"\b{COLUMNS}\s*(?:=|<>|!=)\s*{WORD}")
WRITTEN = re.compile(rf"\b{COLUMNS}\s*=\s*{WORD}\s*(?:,|$)", re.MULTILINE)
SELECTED = re.compile(rf"{WORD}\s+AS\s+{COLUMNS}\b|{WORD},\s*{WORD}\s*,\s*jsonb_build_object")

WORDS = {
    value for name, value in vars(vocabulary).items() if name.isupper() and isinstance(value, str)
}


def words_in(text: str) -> set[str]:
    found: set[str] = set()
    for pattern in (COMPARED, WRITTEN, SELECTED):
        for match in pattern.finditer(text):
            found.update(group for group in match.groups() if group)
    return found


def test_the_sql_files_are_found() -> None:
    assert len(SQL_FILES) >= 5


def test_every_status_and_reason_in_the_sql_is_in_the_vocabulary() -> None:
    spelled = {path.name: words_in(path.read_text()) for path in SQL_FILES}
    unknown = {name: words - WORDS for name, words in spelled.items() if words - WORDS}
    assert unknown == {}
    used = set().union(*spelled.values())
    assert {vocabulary.STEP, vocabulary.FAILED, vocabulary.ABANDONED} <= used  # the check bites


def test_the_public_names_are_the_vocabularys() -> None:
    from otel_jobsteps import attributes, integrations

    assert attributes.OUTCOME_TARGET_DELETED == vocabulary.OUTCOME_TARGET_DELETED
    assert integrations.OUTCOME_RETRY == vocabulary.OUTCOME_RETRY
    assert integrations.EVENT_STALLED == vocabulary.EVENT_STALLED
