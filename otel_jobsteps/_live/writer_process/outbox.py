"""The relay's outbox: the watch's reader on the relay thread, span facts -> wire messages."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ..._core.translate import body_text
from ...attributes import JOB_EVENT_TYPE
from ..watch import plain_dict
from .wire import ENDED, FLUSH, LOG, PLAIN, PROGRESS, REPLAYED, RESOURCE, STARTED, WHOLE

__all__ = ["Outbox"]


class Outbox:
    """Span facts -> messages for the next frame; keeps the open spans' start facts (at most
    ``max_open``, oldest out) to replay them to a writer process that replaces a dead one."""

    def __init__(self, max_open: int) -> None:
        self.messages: list[Any] = []
        self._open: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        self._max_open = max_open
        self._ending: list[int] = []  # ends among the messages: still open until sent
        # The resources told to the writer process, by the SDK's object: an ended span names
        # its resource by number (a process has one or a few; their attributes travel once).
        self._resources: dict[int, tuple[int, dict[str, Any], object]] = {}
        # A start read after its span ended, one reading with its end: sent with that end in
        # one WHOLE message if the end comes next (the writer process tells it both), else alone.
        self._whole_start: tuple[Any, ...] | None = None

    def started(self, fields: tuple[Any, ...], ended: bool, whole: bool) -> None:
        self._send_whole_start()
        if ended and whole:
            self._whole_start = fields
            return
        self._started(fields, ended, whole)

    def _started(self, fields: tuple[Any, ...], ended: bool, whole: bool) -> None:
        self.messages.append((STARTED, fields, ended, whole))
        if JOB_EVENT_TYPE not in fields[6]:  # its attributes; an event is whole at its start
            opened = self._open
            opened[fields[1]] = fields
            if len(opened) > self._max_open:
                opened.popitem(last=False)

    def _send_whole_start(self) -> None:
        start = self._whole_start
        if start is not None:
            self._whole_start = None
            self._started(start, True, True)

    def ended(self, fields: tuple[Any, ...]) -> None:
        resource = fields[11]
        told = self._resources.get(id(resource))
        if told is None:  # kept with the object: its id is never another's
            told = self._resources[id(resource)] = (len(self._resources), dict(resource), resource)
            self.messages.append((RESOURCE, told[0], told[1]))
        start = self._whole_start
        if start is not None and start[1] == fields[1] and start[0] == fields[0]:
            self._whole_start = None
            self.messages.append((WHOLE, (*fields[:11], told[0])))
            return
        self._send_whole_start()
        self.messages.append((ENDED, (*fields[:11], told[0])))
        self._ending.append(fields[1])

    def flush(self, number: int) -> None:
        """Ask the writer process to flush: after every start read before it, a held one too."""
        self._send_whole_start()
        self.messages.append((FLUSH, number))

    def take(self) -> list[Any]:
        """The messages of the next frame; the spans they end are no longer open."""
        self._send_whole_start()
        messages, self.messages = self.messages, []
        for span_id in self._ending:
            self._open.pop(span_id, None)
        self._ending.clear()
        return messages

    def replay(self) -> None:
        """Tell a new writer process first what is still open, in start order."""
        self._send_whole_start()
        told = [(RESOURCE, number, plain) for number, plain, _ in self._resources.values()]
        self.messages[:0] = [*told, *((REPLAYED, fields) for fields in self._open.values())]

    def log(self, fields: tuple[Any, ...]) -> None:
        self._send_whole_start()
        body, attributes = fields[6], fields[7]
        if type(body) is not str or type(attributes) is not dict:  # the usual record is both
            if not (body is None or type(body) in PLAIN or type(body) is bytes):
                body = body_text(body)  # a structure travels as its text: the message it is
            fields = (*fields[:6], body, dict(attributes))
        self.messages.append((LOG, fields))

    def progress(
        self, trace_id: int, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> bool:
        self._send_whole_start()
        self.messages.append((PROGRESS, trace_id, span_id, plain_dict(attributes), time_ns))
        return True
