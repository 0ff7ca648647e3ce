"""A received request body -> staging -> its outcome, the same for the HTTP and gRPC listeners.

One `Intake` per receiver process holds its budget: requests in flight (over the bound: busy)
and the decodes running at once (as many as connections can stage them). Each listener only
translates the `Outcome` to its protocol. The gRPC calls are answered to `listen`-ers (the
request metrics, the access log) here, as the HTTP requests are by their middleware.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.concurrency import run_in_threadpool

from .._http.requestlog import Answered
from .decode import BadRequest, Decoded, carry_resources
from .receipt import Receipt
from .staging import RequestFailed, Staging, StagingUnavailable

__all__ = ["GRPC_CODES", "HTTP_STATUS", "Answer", "Intake", "Outcome", "accepted"]

_UNAVAILABLE = "the database cannot take spans now"
_RETRY = "a statement of this request failed (a lock or statement timeout): retry it later"


class Answer(enum.Enum):
    ACCEPTED = "accepted"  # durable; ``rejected`` spans were not taken
    BAD_REQUEST = "bad request"  # not an OTLP export request: the client must not retry it
    BUSY = "busy"  # too many requests in flight: retry soon
    UNAVAILABLE = "unavailable"  # the database cannot take spans now: retry later


# Each answer's HTTP status (OTLP/HTTP) and gRPC status code's name (OTLP/gRPC).
HTTP_STATUS = {Answer.ACCEPTED: 200, Answer.BAD_REQUEST: 400, Answer.BUSY: 429,
               Answer.UNAVAILABLE: 503}  # fmt: skip
GRPC_CODES = {Answer.ACCEPTED: "OK", Answer.BAD_REQUEST: "INVALID_ARGUMENT",
              Answer.BUSY: "RESOURCE_EXHAUSTED", Answer.UNAVAILABLE: "UNAVAILABLE"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: Answer
    message: str = ""  # why it was refused, or why spans were rejected
    rejected: int = 0
    staged: int = 0  # spans (log records) new to the staging table (the access log shows it)


class Intake:
    """A receiver process's door to its `Staging`, shared by its listeners (one event loop)."""

    def __init__(self, staging: Staging, *, max_in_flight: int) -> None:
        self._staging = staging
        self._max_in_flight = max_in_flight
        self._in_flight = 0  # changed on the event loop only
        # As many bodies decoded at once as connections can stage: the others wait encoded
        # (a 16 MiB body of small spans decodes to some 200 MiB).
        self._staging_slots = asyncio.Semaphore(staging.settings.connections)
        self._dialects = staging.settings.job_dialects()
        self._listeners: list[Callable[[Answered], None]] = []

    def listen(self, listener: Callable[[Answered], None]) -> None:
        """Call ``listener`` with every gRPC call answered (`export_call`)."""
        self._listeners.append(listener)

    async def export_call(
        self, path: str, body: bytes, decode: Callable[[bytes], Decoded]
    ) -> Outcome:
        """`export` for a gRPC call to ``path``, told to the listeners once answered (a failure
        as HTTP's 500 and gRPC's UNKNOWN, the codes the client gets)."""
        started = time.perf_counter()
        status, code, staged = 500, "UNKNOWN", None
        try:
            outcome = await self.export(body, decode)
            status, code = HTTP_STATUS[outcome.answer], GRPC_CODES[outcome.answer]
            staged = outcome.staged
            return outcome
        finally:
            answered = Answered("grpc", path, status, code, time.perf_counter() - started, staged)
            for listener in self._listeners:
                try:
                    listener(answered)
                except Exception as error:  # noqa: BLE001 - the call is answered all the same
                    self._staging.stats.problem("internal_error", error)

    async def export(self, body: bytes, decode: Callable[[bytes], Decoded]) -> Outcome:
        """Decode a whole body and stage its spans; counted in flight only from here (a body
        still arriving holds no slot)."""
        stats = self._staging.stats
        if self._in_flight >= self._max_in_flight:
            stats.add("busy_answers")
            return Outcome(Answer.BUSY, "too many requests in flight")
        self._in_flight += 1
        try:
            return await self._export(body, decode)
        except BadRequest as error:
            stats.add("bad_requests")
            return Outcome(Answer.BAD_REQUEST, str(error)[:500])
        except RequestFailed:  # counted by the staging; collect goes on for the others
            return Outcome(Answer.UNAVAILABLE, _RETRY)
        except StagingUnavailable as error:
            stats.problem("database_unavailable", error)
            return Outcome(Answer.UNAVAILABLE, _UNAVAILABLE)
        finally:
            self._in_flight -= 1

    async def _export(self, body: bytes, decode: Callable[[bytes], Decoded]) -> Outcome:
        staging = self._staging
        staged = None
        if not staging.resting():  # a database away a moment ago is not tried again yet
            async with self._staging_slots:
                staged = await run_in_threadpool(self._stage, body, decode)
        if staged is None:
            staging.stats.add("unavailable_answers")
            return Outcome(Answer.UNAVAILABLE, _UNAVAILABLE)
        decoded, receipt = staged
        rejected = decoded.rejected + receipt.rejected
        if not rejected:
            return Outcome(Answer.ACCEPTED, staged=receipt.staged)
        if decoded.signal == "logs":
            staging.stats.add("rejected_logs", rejected)
            why = "too many log records of a trace wait for their span"
        else:
            staging.stats.add("rejected_spans", rejected)
            why = "a trace over its span limit"
        reason = decoded.reason or receipt.reason or why
        return Outcome(Answer.ACCEPTED, reason, rejected, receipt.staged)

    def _stage(
        self, body: bytes, decode: Callable[[bytes], Decoded]
    ) -> tuple[Decoded, Receipt] | None:
        """Decode and stage ``body``, in one worker thread; None when no connection comes
        before decoding (a database that is away costs no decoding memory)."""
        staging = self._staging
        try:
            staging.ready()
        except StagingUnavailable:
            return None
        decoded = decode(body)
        if decoded.signal == "logs":
            staging.stats.add("logs_outside", decoded.outside)
            return decoded, staging.receive_logs(decoded.logs, decoded.wire, decoded.keys)
        carry_resources(decoded, self._dialects)
        return decoded, staging.receive(decoded.spans, decoded.wire)


def accepted(outcome: Outcome, *, logs: bool) -> Message:
    """The Export response for an accepted request: ``partial_success`` counts what was
    rejected (spans, or log records)."""
    if logs:
        answer_logs = ExportLogsServiceResponse()
        if outcome.rejected:
            answer_logs.partial_success.rejected_log_records = outcome.rejected
            answer_logs.partial_success.error_message = outcome.message
        return answer_logs
    response = ExportTraceServiceResponse()
    if outcome.rejected:
        response.partial_success.rejected_spans = outcome.rejected
        response.partial_success.error_message = outcome.message
    return response
