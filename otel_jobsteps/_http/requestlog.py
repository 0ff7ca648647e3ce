"""What ``serve`` and ``collect`` say about requests: with ``--access-log`` a JSON line each
(a query ``token`` as ``***``); always, at the stop, how many were drained and answered."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from types import FrameType
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Answered", "RequestLog", "print_line"]

SECRET_PARAMETERS = frozenset({"token"})
STAGED_KEY = "spans_staged"  # set in the request's state by collect (spans or log records)
RECORDS_KEY = "records_staged"  # what the access line of a log request names it
_LOG_PATHS = ("/v1/logs", "/opentelemetry.proto.collector.logs.v1.LogsService/Export")
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True, slots=True)
class Answered:
    """A request answered outside the HTTP app (a gRPC call): what its access line and the
    request metrics say. ``status`` is the HTTP status OTLP/HTTP answers for that outcome."""

    protocol: str  # "grpc"
    path: str  # the method's path, e.g. /opentelemetry.proto.collector.trace.v1.TraceService/Export
    status: int
    code: str  # the gRPC status code's name
    seconds: float
    staged: int | None


def print_line(line: str) -> None:
    print(line, flush=True)


def shown_path(scope: Scope) -> str:
    """The path as sent (still percent-encoded) and its query with secrets masked."""
    raw: bytes | None = scope.get("raw_path")
    path = raw.decode("latin-1") if raw is not None else scope["path"]
    query = scope.get("query_string", b"").decode("latin-1")
    if not query:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    masked = [(k, "***" if k.lower() in SECRET_PARAMETERS else v) for k, v in pairs]
    return f"{path}?{urlencode(masked, safe='*')}"


class RequestLog:
    """Counts requests in flight and answered; writes the access lines when ``access_log``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        name: str,
        access_log: bool = False,
        write: Callable[[str], None] = print_line,
        clock: Callable[[], float] = time.monotonic,
        answers: Callable[[Callable[[Answered], None]], None] | None = None,
    ) -> None:
        """``answers`` subscribes to the requests answered elsewhere (collect's gRPC calls)."""
        self.app = app
        self.name = name
        self.access_log = access_log
        self.write = write
        self.clock = clock
        self.in_flight = 0
        self.answered = 0
        self.staged = 0  # spans
        self.records_staged = 0  # log records
        self.stop: tuple[str, int] | None = None  # the signal's name, requests then in flight
        if answers is not None:
            answers(self.answered_elsewhere)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._lifespan_send(send))
        elif scope["type"] == "http":
            await self._request(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _request(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = self.clock()
        status = 500  # what the server answers if the app fails before it starts a response
        state: MutableMapping[str, Any] = scope.setdefault("state", {})

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.in_flight += 1
        try:
            await self.app(scope, receive, sending)
        finally:
            self.in_flight -= 1
            self.answered += 1
            staged = state.get(STAGED_KEY)
            self._count(scope["path"], staged)
            if self.access_log:
                entry = {"method": scope["method"], "path": shown_path(scope), "status": status}
                self.write(self._access_line(entry, self.clock() - started, staged))

    def answered_elsewhere(self, answered: Answered) -> None:
        """Count a gRPC call and write its access line (``method`` is HTTP/2's, as gRPC's)."""
        self.answered += 1
        self._count(answered.path, answered.staged)
        if self.access_log:
            entry = {"protocol": answered.protocol, "method": "POST", "path": answered.path,
                     "status": answered.status, "grpc_status": answered.code}  # fmt: skip
            self.write(self._access_line(entry, answered.seconds, answered.staged))

    def _count(self, path: str, staged: int | None) -> None:
        if path in _LOG_PATHS:
            self.records_staged += staged or 0
        else:
            self.staged += staged or 0

    def _access_line(self, entry: dict[str, Any], seconds: float, staged: int | None) -> str:
        entry = {"service": self.name, **entry, "duration_ms": round(seconds * 1000, 3)}
        if staged is not None:
            logs = entry["path"].split("?", 1)[0] in _LOG_PATHS
            entry[RECORDS_KEY if logs else STAGED_KEY] = staged
        return json.dumps(entry)  # ASCII only: a path from a client cannot act on a terminal

    def _lifespan_send(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self._note_stop_signals()
            elif message["type"] == "lifespan.shutdown.complete":
                self.write(self.stopped_line())
            await send(message)

        return sending

    def stopped_line(self) -> str:
        how = f"on {self.stop[0]}" if self.stop else "without a stop signal"
        drained = self.stop[1] if self.stop else 0
        staged = f", {self.staged} spans staged" if self.name == "collect" else ""
        if self.records_staged:
            staged += f", {self.records_staged} log records staged"
        return (
            f"{self.name}: stopped {how}: drained {drained} requests in flight"
            f" ({self.answered} answered since start{staged})"
        )

    def _note_stop_signals(self) -> None:
        """Remember how many requests were in flight when the stop signal came, then let the
        server's own handler stop it. Signal handlers belong to the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in _STOP_SIGNALS:
            previous = signal.getsignal(number)
            if not callable(previous):
                continue

            def noted(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                if self.stop is None:
                    self.stop = (signal.Signals(signum).name, self.in_flight)
                previous(signum, frame)

            signal.signal(number, noted)
