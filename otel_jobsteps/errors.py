"""Exceptions raised at the configuration surface (constructor, migrate, read API, CLI)."""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "DatabaseUnavailableError",
    "JobStepsError",
    "SchemaNotMigratedError",
]


class JobStepsError(Exception):
    """Base class of every error otel_jobsteps raises to its caller."""


class ConfigurationError(JobStepsError, ValueError):
    """An argument or environment variable is missing or malformed."""


class DatabaseUnavailableError(JobStepsError):
    """The database could not be reached (the message never contains the password)."""


class SchemaNotMigratedError(JobStepsError):
    """The tables are missing or older than this version: run ``otel-jobsteps migrate``."""
