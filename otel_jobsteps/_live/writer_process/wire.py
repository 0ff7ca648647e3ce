"""The wire between the relay and the writer process: frames and their named messages.

A frame is a 4-byte big-endian length, then a `marshal`-encoded list of messages.
Relay -> writer process:
  ``(STARTED, fields, ended, whole)`` a span started (its `SpanFacts` fields; ``ended``: it had
  ended when read, ``whole``: its start and end are one reading); ``(ENDED, fields)`` it ended
  (of its events only those the translation reads); ``(WHOLE, fields)`` both at once: a start
  read after its end, one reading with it, and that end next (the start's fields are the
  end's); ``(REPLAYED, fields)`` a span still open when a new writer process starts (told
  again, so its later end closes its row);
  ``(PROGRESS, trace_id, span_id, attributes, time_ns)`` a running step's newest progress;
  ``(RESOURCE, number, attributes)`` a resource, named by its number in ended spans' fields;
  ``(LOG, fields)`` a log record (its `LogFacts` fields); ``(FLUSH, n)`` flush number n.
Writer process -> relay:
  ``(FLUSHED, n, ok, stats)`` flush n done (committed if ok); ``(STATS, stats)`` its counters;
  ``(WARNING, level, text)`` a warning to log in the job's process;
  ``(METRICS, steps, attempts)`` what a committed batch closed and finished.
The first frame the writer process reads holds its settings (`Settings.payload`, as JSON).
"""

from __future__ import annotations

import marshal
import os
import struct
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = [
    "ENDED",
    "FLUSH",
    "FLUSHED",
    "LOG",
    "METRICS",
    "PLAIN",
    "PROGRESS",
    "REPLAYED",
    "RESOURCE",
    "STARTED",
    "STATS",
    "WARNING",
    "WHOLE",
    "read_frames",
    "write_frame",
]

# Relay -> writer process.
STARTED: Final = "s"
WHOLE: Final = "w"
ENDED: Final = "e"
REPLAYED: Final = "r"
RESOURCE: Final = "R"
PROGRESS: Final = "p"
LOG: Final = "L"
FLUSH: Final = "f"
# Writer process -> relay.
FLUSHED: Final = "a"
STATS: Final = "t"
WARNING: Final = "l"
METRICS: Final = "m"

_LENGTH = struct.Struct(">I")
_MARSHAL_VERSION = 4
PLAIN = (str, bool, int, float)  # values marshal carries as they are


def write_frame(fd: int, messages: list[Any]) -> None:
    """One frame on ``fd``, whole (os.write may take part of it)."""
    payload = _dumps(messages)
    data = memoryview(_LENGTH.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


def read_frames(fd: int) -> Iterator[list[Any]]:
    """The frames arriving on ``fd`` until it closes."""
    buffer = bytearray()
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffer += chunk
        while len(buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer)
            end = _LENGTH.size + length
            if len(buffer) < end:
                break
            frame = marshal.loads(bytes(buffer[_LENGTH.size : end]))
            del buffer[:end]
            yield frame


def _dumps(messages: list[Any]) -> bytes:
    try:
        return marshal.dumps(messages, _MARSHAL_VERSION)
    except ValueError:  # a value marshal cannot hold: only that message is made plain
        return marshal.dumps([_plain(message) for message in messages], _MARSHAL_VERSION)


def _plain(value: Any) -> Any:
    """The same data with every value marshal cannot hold turned into its text."""
    if value is None or type(value) in PLAIN:
        return value
    if isinstance(value, tuple | list):
        return tuple(_plain(item) for item in value)
    if isinstance(value, Mapping):
        return {_text(key): _plain(item) for key, item in value.items()}
    return _text(value)


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a value's own __str__ may fail: it must not stop the rest
        return "<unprintable>"
