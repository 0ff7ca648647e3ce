"""The ASGI app of ``otel-jobsteps collect``: OTLP/HTTP ``POST /v1/traces``.

Answers follow the OTLP/HTTP specification: 200 with an ``ExportTraceServiceResponse`` once
the spans are durable (``partial_success`` counts the spans it rejected); 400 with a
``google.rpc.Status`` for a body it cannot decode (clients do not retry it); 413 over the size
limit; 415 for another content type; 429 when too many requests are in flight, 503 while the
database cannot take them, both with ``Retry-After`` (clients retry). The body is answered in
the request's encoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import AsyncIterator, Callable

from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..health import COLLECT_RIGHTS, HealthMiddleware, Readiness
from ..requestlog import RequestLog
from ..stats import logger
from .decode import BadRequest, Decoded, decode_json, decode_protobuf
from .settings import DEFAULT_MAX_BODY_BYTES
from .staging import Staging, StagingUnavailable

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_DECODERS: dict[str, Callable[[bytes], Decoded]] = {PROTOBUF: decode_protobuf, JSON: decode_json}
_INVALID_ARGUMENT = 3  # google.rpc.Code
_RESOURCE_EXHAUSTED = 8
_UNAVAILABLE = 14


class _TooLarge(Exception):
    pass


def _encoded(message: Message, media_type: str) -> bytes:
    if media_type == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def _status(code: int, message: str, media_type: str, status: int, **headers: str) -> Response:
    body = _encoded(Status(code=code, message=message), media_type)
    return Response(body, status_code=status, media_type=media_type, headers=headers)


async def _body(request: Request, limit: int) -> bytes:
    """The request body, gunzipped when it says so; `_TooLarge` past ``limit`` bytes."""
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


def create_app(
    staging: Staging,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_in_flight: int = 16,
    retry_after_s: int = 2,
    settle_every_s: float = 60.0,
    access_log: bool = False,
) -> Starlette:
    """The receiver as an ASGI app over ``staging`` (which it closes on shutdown), with
    ``/healthz`` and ``/readyz``; ``access_log`` writes a line per request."""
    in_flight = 0  # changed on the event loop only
    staging_slots = asyncio.Semaphore(staging.settings.connections)

    async def traces(request: Request) -> Response:
        nonlocal in_flight
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        decode = _DECODERS.get(media_type)
        if decode is None:
            return _status(
                _INVALID_ARGUMENT,
                f"content-type must be {PROTOBUF} or {JSON}",
                JSON,
                415,
            )
        if in_flight >= max_in_flight:
            staging.stats.add("busy_answers")
            return _status(
                _RESOURCE_EXHAUSTED,
                "too many requests in flight",
                media_type,
                429,
                **{"Retry-After": "1"},
            )
        in_flight += 1
        try:
            return await _export(request, decode, media_type)
        finally:
            in_flight -= 1

    def unavailable(media_type: str) -> Response:
        return _status(
            _UNAVAILABLE,
            "the database cannot take spans now",
            media_type,
            503,
            **{"Retry-After": str(retry_after_s)},
        )

    async def _export(
        request: Request, decode: Callable[[bytes], Decoded], media_type: str
    ) -> Response:
        try:  # before the body is read and decoded: a database that is away costs no memory
            if staging.resting():
                raise StagingUnavailable("resting")
            await run_in_threadpool(staging.ready)
        except StagingUnavailable:
            staging.stats.add("unavailable_answers")
            return unavailable(media_type)
        try:
            body = await _body(request, max_body_bytes)
            # Only as many bodies are decoded as connections can stage them (read outside: a
            # slow client holds no slot): the others wait encoded, so memory holds at most that
            # many decoded requests (a 16 MiB body of small spans decodes to some 200 MiB).
            async with staging_slots:
                decoded = await run_in_threadpool(decode, body)
                receipt = await run_in_threadpool(staging.receive, decoded.spans, decoded.wire)
        except _TooLarge:
            staging.stats.add("too_large_answers")
            return _status(_INVALID_ARGUMENT, f"body over {max_body_bytes} bytes", media_type, 413)
        except BadRequest as error:
            staging.stats.add("bad_requests")
            return _status(_INVALID_ARGUMENT, str(error)[:500], media_type, 400)
        except StagingUnavailable as error:
            staging.stats.problem("database_unavailable", error)
            return unavailable(media_type)
        request.state.spans_staged = receipt.staged  # for the access log
        response = ExportTraceServiceResponse()
        rejected = decoded.rejected + receipt.rejected
        if rejected:
            staging.stats.add("rejected_spans", rejected)
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = decoded.reason or "a trace over its span limit"
        return Response(_encoded(response, media_type), media_type=media_type)

    async def settle_forever() -> None:
        while True:
            await asyncio.sleep(settle_every_s)
            try:
                await run_in_threadpool(staging.settle)
            except Exception as error:  # noqa: BLE001 - the next round tries again
                staging.stats.problem("settle_failed", error)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(settle_forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            staging.close()
            logger.info("collect stopped: %s", staging.stats.snapshot())

    routes = [Route("/v1/traces", traces, methods=["POST"])]
    readiness = Readiness(
        staging.settings.dsn, schema=staging.settings.schema, rights=COLLECT_RIGHTS
    )
    layers = [
        Middleware(RequestLog, name="collect", access_log=access_log),
        Middleware(HealthMiddleware, readiness=readiness),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=layers)
