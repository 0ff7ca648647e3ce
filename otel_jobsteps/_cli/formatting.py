"""Durations and times as people read them, shared by the CLI's renderer and the web page.
Pure functions; nothing here escapes or colours (the callers do)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

__all__ = [
    "LINE_CHARS",
    "format_ago",
    "format_difference",
    "format_duration",
    "format_time",
    "format_utc",
    "severity_word",
    "shorten",
]

LINE_CHARS = 2_000  # a log line's message as shown (its body may be a megabyte)
SEVERITIES = ("WARN", "ERROR", "FATAL", "DEBUG", "TRACE")


def shorten(text: str, most: int = LINE_CHARS) -> str:
    """``text`` cut after ``most`` characters, saying how many more there were."""
    return text if len(text) <= most else f"{text[:most]}… ({len(text) - most:,} more characters)"


def severity_word(severity: str | None) -> str:
    """The family of a severity text, for its colour: WARN for WARNING or WARN3, ERROR for
    ERROR2; INFO for anything else."""
    text = (severity or "").upper()
    return next((word for word in SEVERITIES if text.startswith(word)), "INFO")


def format_duration(value: timedelta | None) -> str:
    """Short human duration: 0s, 850µs, 12ms, 1.20s, 2m03s, 1h30m, 3d04h (zero tails dropped)."""
    if value is None:
        return "-"
    seconds = max(value.total_seconds(), 0)
    if seconds == 0:
        return "0s"
    if seconds < 0.001:
        return f"{seconds * 1_000_000:.0f}µs"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        big, small = f"{days}d", (hours, "h")
    elif hours:
        big, small = f"{hours}h", (minutes, "m")
    else:
        big, small = f"{minutes}m", (secs, "s")
    return big + (f"{small[0]:02d}{small[1]}" if small[0] else "")


def format_difference(value: timedelta | None) -> str:
    """A signed duration: +1.20s (longer), -850ms (shorter), 0s, - for none."""
    if value is None:
        return "-"
    sign = "-" if value < timedelta(0) else "+" if value > timedelta(0) else ""
    return sign + format_duration(abs(value))


def format_time(value: datetime | None) -> str:
    """A timestamp to the millisecond with its UTC offset, or ``-``."""
    return "-" if value is None else value.isoformat(sep=" ", timespec="milliseconds")


def format_utc(value: datetime | None) -> str:
    """A timestamp in UTC to the millisecond (``2026-12-01 21:02:28.123 UTC``), or ``-``."""
    if value is None:
        return "-"
    utc = value.astimezone(timezone.utc).replace(tzinfo=None)
    return utc.isoformat(sep=" ", timespec="milliseconds") + " UTC"


_AGO_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def format_ago(value: datetime | None, now: datetime) -> str:
    """How long before ``now`` ``value`` was, in its largest unit: ``3 min ago``, ``just now``;
    a time after ``now`` (clock skew) reads ``in 2 s``."""
    if value is None:
        return "-"
    seconds = (now - value).total_seconds()
    whole = abs(seconds)
    if whole < 1:
        return "just now"
    name, size = next((name, size) for name, size in _AGO_UNITS if whole >= size)
    count = int(whole // size)
    return f"{count} {name} ago" if seconds > 0 else f"in {count} {name}"
