"""What the command lines (``cli`` and ``actions.cli``) read and print alike: durations,
bounded numbers, the database options, text that must be UTF-8, JSON made safe for a terminal."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .._pg.db import check_dsn
from ..errors import ConfigurationError, printable

__all__ = [
    "MAX_DURATION",
    "check_factor",
    "dsn_option",
    "duration_argument",
    "factor_argument",
    "int_between",
    "is_utf8",
    "parse_duration",
    "print_json",
    "schema_option",
    "seconds_between",
    "utf8",
]

_DURATION_PART = re.compile(r"([0-9]+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Far enough back for any cut-off, near enough that now() minus it stays a valid timestamp.
MAX_DURATION = timedelta(days=36500)


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``2d``, ``1w`` or combinations like ``1h30m``; up to 36500d."""
    compact = text.strip().lower()
    parts = _DURATION_PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"invalid duration {text!r}: use forms like 90s, 15m, 1h, 2d or 1h30m")
    too_long = f"invalid duration {text!r}: at most {MAX_DURATION.days}d"
    if any(len(n) > 12 for n, _ in parts):  # int() of thousands of digits is slow, then refused
        raise ValueError(too_long)
    seconds = sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: it must be longer than zero")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(too_long)
    return timedelta(seconds=seconds)


def duration_argument(text: str) -> timedelta:
    """An argparse type: `parse_duration`."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_factor(factor: float) -> float:
    """``factor`` if a finite number above zero, else a `ConfigurationError`."""
    if not (math.isfinite(factor) and factor > 0):
        raise ConfigurationError(f"the overdue factor must be a number above 0, got {factor!r}")
    return factor


def factor_argument(text: str) -> float:
    """An argparse type: a number `check_factor` takes."""
    try:
        return check_factor(float(text))
    except (ValueError, ConfigurationError):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}") from None


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a decimal integer from ``low`` to ``high``, else one clear line."""

    def parse(text: str) -> int:
        digits = text.strip()
        if not re.fullmatch(r"[0-9]{1,19}", digits) or not low <= int(digits) <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text!r}"
            )
        return int(digits)

    return parse


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: seconds from ``low`` to ``high`` (no nan, no inf)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # False for nan
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds at least {low:g} and at most {high:g}, got {text!r}"
            )
        return value

    return parse


def is_utf8(text: str) -> bool:
    """False for text made of undecodable bytes: Python passes argv and environment bytes that
    are not UTF-8 on as lone surrogates, which nothing downstream can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8(text: str, what: str) -> str:
    """``text`` if it is UTF-8 (`is_utf8`), else a `ConfigurationError` naming ``what``."""
    if not is_utf8(text):
        raise ConfigurationError(f"{what} is not valid UTF-8")
    return text


def dsn_option(args: argparse.Namespace, *, read: bool = False) -> str:
    """The primary's DSN; ``read``: a replica's first (--read-dsn, $OTEL_JOBSTEPS_READ_DSN).
    Options beat the environment: an explicit --dsn beats $OTEL_JOBSTEPS_READ_DSN."""
    dsn: str | None = (
        (args.read_dsn if read else None)
        or args.dsn
        or (os.environ.get("OTEL_JOBSTEPS_READ_DSN") if read else None)
        or os.environ.get("OTEL_JOBSTEPS_DSN")
    )
    if not dsn:
        raise ConfigurationError("no database: pass --dsn or set OTEL_JOBSTEPS_DSN")
    return check_dsn(utf8(dsn, "the DSN"))


def schema_option(args: argparse.Namespace) -> str:
    """--schema, else $OTEL_JOBSTEPS_SCHEMA, else ``public``."""
    name = str(args.schema or os.environ.get("OTEL_JOBSTEPS_SCHEMA") or "public")
    return utf8(name, "the schema name")


def _json_escape(char: str) -> str:
    return json.dumps(char)[1:-1]  # \uXXXX, a surrogate pair beyond the BMP


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout. Every character a terminal could act on gets its
    \\u escape (json does only C0 controls): the same values for a parser, inert on a terminal."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    print("\n".join(printable(line, _json_escape) for line in text.split("\n")))
