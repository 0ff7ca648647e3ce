"""The ASGI app of ``otel-jobsteps collect``: OTLP/HTTP ``POST /v1/traces`` and ``/v1/logs``.

Answers follow the OTLP/HTTP specification: 200 with an ``ExportTraceServiceResponse`` (an
``ExportLogsServiceResponse``) once the spans (records) are durable (``partial_success`` counts
the ones it rejected); 400 with a
``google.rpc.Status`` for a body it cannot decode (clients do not retry it); 413 over the size
limit; 415 for another content type; 429 when too many requests are in flight or their bodies
hold too many bytes, 503 while the database cannot take them, both with ``Retry-After``
(clients retry); 408 (and the connection closed) for a body slower than the body timeout. The
body is answered in the request's encoding. A body still arriving holds no in-flight slot
(`Intake`). With ``grpc_listen`` the app also serves OTLP/gRPC (`grpc_service`) for its
lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import anyio
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from .._http.health import COLLECT_RIGHTS, HealthMiddleware, Readiness
from .._http.requestlog import RequestLog
from .._telemetry.log import logger
from .decode import BadRequest, Decoded, decode_json, decode_protobuf
from .intake import Answer, Intake, Outcome, accepted
from .logs import decode_logs_json, decode_logs_protobuf
from .settings import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES, SHUTDOWN_GRACE_S
from .staging import Staging

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_DECODERS: dict[str, Callable[[bytes], Decoded]] = {PROTOBUF: decode_protobuf, JSON: decode_json}
_LOG_DECODERS: dict[str, Callable[[bytes], Decoded]] = {
    PROTOBUF: decode_logs_protobuf,
    JSON: decode_logs_json,
}
_INVALID_ARGUMENT = 3  # google.rpc.Code
_DEADLINE_EXCEEDED = 4
_RESOURCE_EXHAUSTED = 8
_UNAVAILABLE = 14


class _TooLarge(Exception):
    pass


class _Busy(Exception):
    pass


class _Buffers:
    """The bytes of HTTP bodies held at once (arriving, or waiting to be staged), bounded: a
    flood of large bodies is told to back off, while slow clients, a few bytes each, are not."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0  # changed on the event loop only

    @contextlib.contextmanager
    def request(self) -> Iterator[Callable[[int], None]]:
        """A request's share: the function it calls for each piece of its body (`_Busy` over
        the bound), all of it released when the block ends."""
        taken = 0

        def take(size: int) -> None:
            nonlocal taken
            if self._held + size > self._limit:
                raise _Busy
            self._held += size
            taken += size

        try:
            yield take
        finally:
            self._held -= taken


def _encoded(message: Message, media_type: str) -> bytes:
    if media_type == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def _status(code: int, message: str, media_type: str, status: int, **headers: str) -> Response:
    body = _encoded(Status(code=code, message=message), media_type)
    return Response(body, status_code=status, media_type=media_type, headers=headers)


async def _body(request: Request, limit: int, take: Callable[[int], None]) -> bytes:
    """The request body, gunzipped when it says so, each piece counted by ``take``;
    `_TooLarge` past ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("gzip", "identity", ""):
        raise BadRequest(f"unsupported content-encoding {encoding[:40]!r} (gzip or none)")
    gunzip = _Gunzip() if encoding == "gzip" else None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        if gunzip is not None:
            chunk = gunzip.inflate(chunk, limit - size)
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        take(len(chunk))
        parts.append(chunk)
    if gunzip is not None and not gunzip.ended():
        raise BadRequest("invalid gzip body: truncated")
    return b"".join(parts)


class _Gunzip:
    """A gzip body inflated as it arrives, every member of it (a body may hold several
    concatenated, as `gzip` writes appended data; each is part of the body)."""

    def __init__(self) -> None:
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def inflate(self, data: bytes, room: int) -> bytes:
        """What ``data`` inflates to; `_TooLarge` once that exceeds ``room`` bytes."""
        out: list[bytes] = []
        while data:
            if self._inflater.eof:  # the next member begins
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                piece = self._inflater.decompress(data, max(room, 0) + 1)
            except zlib.error as error:
                raise BadRequest(f"invalid gzip body: {error}") from None
            if self._inflater.unconsumed_tail:
                raise _TooLarge
            room -= len(piece)
            out.append(piece)
            data = self._inflater.unused_data if self._inflater.eof else b""
        return b"".join(out)

    def ended(self) -> bool:
        return self._inflater.eof


@dataclass(frozen=True, slots=True)
class _Limits:
    max_body_bytes: int
    body_timeout_s: float
    retry_after_s: int


class _Export:
    """The two routes' handler: read the body within its limits, decode, stage, answer."""

    def __init__(self, staging: Staging, intake: Intake, limits: _Limits, max_in_flight: int):
        self._staging = staging
        self._intake = intake
        self._limits = limits
        self._buffers = _Buffers(max_in_flight * limits.max_body_bytes)  # in-flight bodies

    async def traces(self, request: Request) -> Response:
        return await self._export(request, _DECODERS)

    async def logs(self, request: Request) -> Response:
        return await self._export(request, _LOG_DECODERS)

    async def _export(
        self, request: Request, decoders: dict[str, Callable[[bytes], Decoded]]
    ) -> Response:
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        decode = decoders.get(media_type)
        if decode is None:
            message = f"content-type must be {PROTOBUF} or {JSON}"
            return _status(_INVALID_ARGUMENT, message, JSON, 415)
        with self._buffers.request() as take:
            body = await self._read(request, media_type, take)
            if isinstance(body, Response):
                return body
            outcome = await self._intake.export(body, decode)
        request.state.spans_staged = outcome.staged  # for the access log
        return self._answer(outcome, media_type, logs=decoders is _LOG_DECODERS)

    async def _read(
        self, request: Request, media_type: str, take: Callable[[int], None]
    ) -> bytes | Response:
        """The body, or the answer when it cannot be read within the limits."""
        limits, stats = self._limits, self._staging.stats
        try:
            with anyio.fail_after(limits.body_timeout_s):
                return await _body(request, limits.max_body_bytes, take)
        except TimeoutError:  # a slow client: its connection is closed, not kept for more
            stats.add("body_timeouts")
            message = f"the body took over {limits.body_timeout_s:g} s to arrive"
            return _status(_DEADLINE_EXCEEDED, message, media_type, 408, Connection="close")
        except _TooLarge:
            stats.add("too_large_answers")
            message = f"body over {limits.max_body_bytes} bytes"
            return _status(_INVALID_ARGUMENT, message, media_type, 413)
        except ClientDisconnect:  # gone before its body arrived: nobody reads an answer
            stats.add("clients_gone")
            return Response(status_code=400)
        except _Busy:  # the rest of its body is not read: its connection is closed
            stats.add("busy_answers")
            busy = Outcome(Answer.BUSY, "too many request bytes held")
            return self._answer(busy, media_type, logs=False, Connection="close")
        except BadRequest as error:
            stats.add("bad_requests")
            return _status(_INVALID_ARGUMENT, str(error)[:500], media_type, 400)

    def _answer(self, outcome: Outcome, media_type: str, *, logs: bool, **headers: str) -> Response:
        if outcome.answer is Answer.BAD_REQUEST:
            return _status(_INVALID_ARGUMENT, outcome.message, media_type, 400)
        if outcome.answer is Answer.BUSY:
            headers["Retry-After"] = "1"
            return _status(_RESOURCE_EXHAUSTED, outcome.message, media_type, 429, **headers)
        if outcome.answer is Answer.UNAVAILABLE:
            retry_after = str(self._limits.retry_after_s)
            return _status(
                _UNAVAILABLE, outcome.message, media_type, 503, **{"Retry-After": retry_after}
            )
        response = accepted(outcome, logs=logs)
        return Response(_encoded(response, media_type), media_type=media_type)


async def _settle_forever(staging: Staging, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await run_in_threadpool(staging.settle)
        except Exception as error:  # noqa: BLE001 - the next round tries again
            staging.stats.problem("settle_failed", error)


def _lifespan(
    staging: Staging,
    intake: Intake,
    limits: _Limits,
    settle_every_s: float,
    grpc_listen: str | None,
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Settle passes and the gRPC listener for the app's lifetime; staging closed after."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        grpc_server = None
        if grpc_listen is not None:
            from .grpc_service import start_grpc

            grpc_server = await start_grpc(
                intake,
                grpc_listen,
                max_message_bytes=limits.max_body_bytes,
                retry_after_s=limits.retry_after_s,
            )
        task = asyncio.create_task(_settle_forever(staging, settle_every_s))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if grpc_server is not None:  # its calls in flight finish first, as HTTP's did
                await grpc_server.stop(SHUTDOWN_GRACE_S)
            staging.close()
            logger.info("collect stopped: %s", staging.stats.snapshot())

    return lifespan


def create_app(
    staging: Staging,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_in_flight: int = 16,
    retry_after_s: int = 2,
    settle_every_s: float = 60.0,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    grpc_listen: str | None = None,
    access_log: bool = False,
) -> Starlette:
    """The receiver as an ASGI app over ``staging`` (closed on shutdown), with /healthz and
    /readyz; with ``grpc_listen`` (``HOST:PORT``) also OTLP/gRPC, on the same budget."""
    intake = Intake(staging, max_in_flight=max_in_flight)
    limits = _Limits(max_body_bytes, body_timeout_s, retry_after_s)
    export = _Export(staging, intake, limits, max_in_flight)
    routes = [
        Route("/v1/traces", export.traces, methods=["POST"]),
        Route("/v1/logs", export.logs, methods=["POST"]),
    ]
    readiness = Readiness(
        staging.settings.dsn, schema=staging.settings.schema, rights=COLLECT_RIGHTS
    )
    layers = [
        Middleware(RequestLog, name="collect", access_log=access_log, answers=intake.listen),
        Middleware(HealthMiddleware, readiness=readiness),
    ]
    lifespan = _lifespan(staging, intake, limits, settle_every_s, grpc_listen)
    app = Starlette(routes=routes, lifespan=lifespan, middleware=layers)
    app.state.intake = intake  # its gRPC calls are counted by whoever listens (the metrics)
    return app
