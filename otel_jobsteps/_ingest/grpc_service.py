"""OTLP/gRPC ``TraceService/Export`` and ``LogsService/Export`` on ``grpcio``'s asyncio
server, in the event loop of the HTTP app and on its `Intake` (one budget per process).

The services are opentelemetry-proto's (their service names and messages), registered with
the request kept as bytes: an Export that does not decode then goes through `decode_protobuf`
and is answered INVALID_ARGUMENT (grpcio answers UNKNOWN for a request its deserializer
rejects), and it is decoded in a thread under the intake's bound, not on the event loop.
Refusals to retry carry ``google.rpc.RetryInfo``, as OTLP/gRPC throttling says: in the status
details (``grpc-status-details-bin``) and as ``google.rpc.retryinfo-bin`` (the one trailer the
Python exporter reads).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from .decode import Decoded, decode_protobuf
from .intake import GRPC_CODES, Answer, Intake, accepted
from .logs import decode_logs_protobuf

__all__ = ["grpc_target", "start_grpc"]

_TRACES = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"]
_LOGS = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"]
_CODES = {answer: grpc.StatusCode[name] for answer, name in GRPC_CODES.items()}


def grpc_target(host: str, port: int) -> str:
    """``HOST:PORT`` as grpc spells it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _ExportService:
    """One OTLP service's ``Export``: traces, or logs."""

    def __init__(
        self,
        intake: Intake,
        retry_after_s: int,
        decode: Callable[[bytes], Decoded],
        *,
        logs: bool,
        path: str,
    ) -> None:
        self._intake = intake
        self._path = path  # /package.Service/Export
        self._retry_after = {Answer.BUSY: 1, Answer.UNAVAILABLE: retry_after_s}
        self._decode = decode
        self._logs = logs

    async def Export(  # the rpc's name
        self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> bytes:
        outcome = await self._intake.export_call(self._path, request, self._decode)
        if outcome.answer is Answer.ACCEPTED:
            return accepted(outcome, logs=self._logs).SerializeToString()
        code = _CODES[outcome.answer]
        trailers: tuple[tuple[str, bytes], ...] = ()
        if outcome.answer in self._retry_after:
            retry = RetryInfo(retry_delay=Duration(seconds=self._retry_after[outcome.answer]))
            detail = AnyMessage()
            detail.Pack(retry)
            status = Status(code=code.value[0], message=outcome.message, details=[detail])
            trailers = (
                ("grpc-status-details-bin", status.SerializeToString()),
                ("google.rpc.retryinfo-bin", retry.SerializeToString()),
            )
        await context.abort(code, outcome.message, trailers)
        raise AssertionError("abort returns by raising")


async def start_grpc(
    intake: Intake, address: str, *, max_message_bytes: int, retry_after_s: int
) -> grpc.aio.Server:
    """A started server for ``address`` (grpc's ``HOST:PORT``), bound with SO_REUSEPORT so
    ``--workers`` processes share the port; `OSError` if it cannot be bound."""
    server = grpc.aio.server(
        options=[
            ("grpc.so_reuseport", 1),
            ("grpc.max_receive_message_length", max_message_bytes),  # after gunzip
        ]
    )
    handlers = []
    for descriptor, decode, logs in (
        (_TRACES, decode_protobuf, False),
        (_LOGS, decode_logs_protobuf, True),
    ):
        path = f"/{descriptor.full_name}/Export"
        service = _ExportService(intake, retry_after_s, decode, logs=logs, path=path)
        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(
            service.Export  # bytes in, bytes out
        )
        handlers.append(
            grpc.method_handlers_generic_handler(descriptor.full_name, {"Export": handler})
        )
    server.add_generic_rpc_handlers(tuple(handlers))
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as error:  # grpcio raises where older versions returned 0
        raise OSError(f"cannot listen for gRPC on {address}: {error}") from None
    if not bound:
        raise OSError(f"cannot listen for gRPC on {address}")
    await server.start()
    return server
