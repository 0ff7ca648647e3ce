"""SQL kept as SQL: named runtime queries and numbered migrations, loaded from package files."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from typing_extensions import LiteralString

__all__ = ["load_queries", "migrations"]

_NAME = re.compile(r"^-- name: (\w+) --$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@cache
def load_queries() -> dict[str, LiteralString]:
    """The blocks of ``queries.sql`` by name (text before the first header is the file's intro)."""
    text = resources.files(__package__).joinpath("queries.sql").read_text("utf-8")
    parts = _NAME.split(text)[1:]
    pairs = zip(parts[::2], parts[1::2], strict=True)
    return {name: cast("LiteralString", body.strip()) for name, body in pairs}


@cache
def migrations() -> tuple[tuple[int, str, LiteralString], ...]:
    """``(version, name, sql)`` of every migration file, in version order."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            sql_text = entry.read_text("utf-8")
            found.append((int(match.group(1)), match.group(2), sql_text))
    return tuple(sorted(found))
