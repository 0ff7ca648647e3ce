"""Exceptions raised at the configuration surface (constructor, migrate, read API, CLI), the
one-line rendering of any error for messages and logs, and the escaping of hostile text."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

__all__ = [
    "ConfigurationError",
    "DatabaseUnavailableError",
    "JobStepsError",
    "SchemaNotMigratedError",
    "describe",
    "printable",
]

MAX_MESSAGE_CHARS = 1000


class JobStepsError(Exception):
    """Base class of every error otel_jobsteps raises to its caller."""


class ConfigurationError(JobStepsError, ValueError):
    """An argument or environment variable is missing or malformed."""


class DatabaseUnavailableError(JobStepsError):
    """The database could not be reached (the message never contains the password)."""


class SchemaNotMigratedError(JobStepsError):
    """The tables are missing or older than this version: run ``otel-jobsteps migrate``."""


def describe(error: object) -> str:
    """One printable line for a log or a CLI message, with every line of the cause kept.

    libpq puts the cause ("Connection refused") on the first line and a hint on the next, and
    a server's DETAIL may quote row values written by job code: lines are joined, control
    characters escaped, and the text bounded.
    """
    lines: list[str] = []
    for line in str(error).splitlines():
        line = line.strip()
        if line and line not in lines:
            lines.append(line)
    text = " / ".join(lines) or type(error).__name__
    text = printable(text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text


def _python_escape(char: str) -> str:
    return repr(char)[1:-1]


def printable(text: str, escape: Callable[[str], str] = _python_escape) -> str:
    """``text`` with every character that is not text shown as its escape (``\\n``,
    ``\\x1b``, ``\\u202e``), or as ``escape`` writes it.

    Job data can neither act on the terminal nor forge a line of output: controls (C0 with the
    newline, DEL, C1), bidi overrides and isolates, line and paragraph separators and the other
    format characters but the joiners are all refused, so a step key with a newline stays on
    its row, shown as ``\\n``, and a U+202E cannot reverse what follows it. Spaces such as
    U+00A0 or U+3000 and the emoji joiner stay as they are.
    """
    if text.isprintable():
        return text
    return "".join(char if _shown(char) else escape(char) for char in text)


# Not "printable" to Python, yet text people write: spaces other than U+0020 (no-break, CJK),
# private use, and the joiners of emoji and Indic sequences.
_KEPT = frozenset({"Zs", "Co"})
_JOINERS = frozenset("\u200c\u200d")


def _shown(char: str) -> bool:
    return char.isprintable() or char in _JOINERS or unicodedata.category(char) in _KEPT
