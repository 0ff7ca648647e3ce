"""Exceptions raised at the configuration surface (constructor, migrate, read API, CLI), and
the one-line rendering of any error for messages and logs."""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "DatabaseUnavailableError",
    "JobStepsError",
    "SchemaNotMigratedError",
    "describe",
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
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text
