"""Job ids, types and step keys as PostgreSQL can index them: cleaned (`clean_text`) and held
within limits in UTF-8 bytes, where the database counts bytes. Both doors apply them at their
boundary: the translation when it scopes a job (the processor, and collect's placing), and
collect's decoding (a job span whose ids do not fit is refused there) and staging.

PostgreSQL refuses a btree entry over 2,704 bytes (8 kB pages). The widest entry these limits
allow is ``job_event_open_gauges`` (domain, job_type, step_key) INCLUDE (created_at,
heartbeat_at, id): 1,024 + 512 + 1,024 bytes of text (256 characters of 4 bytes) and at most
some 60 bytes of headers, null bitmap, padding and the three 8-byte columns, 2,620 bytes in
all. The (domain, job_id, ...) keys of job_event, job_log and the otlp_* tables take at most
2,048 + 40 bytes; job_event_tag (step_key, message, created_at) a tag name of 64 characters
and a value of 256: at most 1,300. docs/ingest.md states the limits.
"""

from __future__ import annotations

from .detail import clean_text
from .vocabulary import MAX_ID_CHARS

__all__ = [
    "MAX_ID_BYTES",
    "MAX_JOB_TYPE_BYTES",
    "MAX_STEP_KEY_CHARS",
    "after_prefix",
    "cut_bytes",
    "id_fits",
    "job_type_text",
    "step_key_text",
]

MAX_ID_BYTES = 1024  # a domain's or a job id's UTF-8 bytes (and at most MAX_ID_CHARS characters)
MAX_JOB_TYPE_BYTES = 512  # a job type is cut here (and at MAX_ID_CHARS characters)
MAX_STEP_KEY_CHARS = 256  # a step key is cut here: at most 1,024 bytes


def id_fits(value: object) -> bool:
    """Whether ``value`` as text is a domain or job id PostgreSQL can index: at most
    `MAX_ID_CHARS` characters and `MAX_ID_BYTES` bytes (NUL and surrogates count as the
    U+FFFD that replaces them); an int too large to write out never fits."""
    try:
        text = value if type(value) is str else str(value)
    except ValueError:
        return False
    if len(text) > MAX_ID_CHARS:
        return False
    return len(text) * 4 <= MAX_ID_BYTES or len(clean_text(text).encode()) <= MAX_ID_BYTES


def cut_bytes(text: str, max_bytes: int) -> str:
    """``text`` (clean: no surrogates) cut to at most ``max_bytes`` UTF-8 bytes, on a character."""
    if len(text) * 4 <= max_bytes:
        return text
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode(errors="ignore")


def job_type_text(value: object) -> str:
    """A ``job.type`` as written: clean, cut at `MAX_ID_CHARS` characters, `MAX_JOB_TYPE_BYTES`."""
    return cut_bytes(clean_text(value, MAX_ID_CHARS), MAX_JOB_TYPE_BYTES)


def step_key_text(value: object) -> str:
    """A ``job.step.key`` as written and staged: clean, cut at `MAX_STEP_KEY_CHARS` characters
    (at most 1,024 bytes)."""
    return clean_text(value, MAX_STEP_KEY_CHARS)


def after_prefix(prefix: str) -> str:
    """The upper bound of an id prefix search: ``prefix`` with its last character's successor
    (surrogates skipped); for top code points only, a text longer than any id."""
    text = prefix.rstrip(chr(0x10FFFF))
    if not text:
        return chr(0x10FFFF) * (MAX_ID_CHARS + 1)
    following = ord(text[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000
    return text[:-1] + chr(following)
