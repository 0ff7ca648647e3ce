"""A received request body -> staging -> its outcome, the same for the HTTP and gRPC listeners.

One `Intake` per receiver process holds its budget: requests in flight (over the bound: busy)
and the decodes running at once (as many as connections can stage them). Each listener only
translates the `Outcome` to its protocol.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.concurrency import run_in_threadpool

from .decode import BadRequest, Decoded
from .staging import Staging, StagingUnavailable

__all__ = ["Answer", "Intake", "Outcome", "accepted"]

_UNAVAILABLE = "the database cannot take spans now"


class Answer(enum.Enum):
    ACCEPTED = "accepted"  # durable; ``rejected`` spans were not taken
    BAD_REQUEST = "bad request"  # not an OTLP export request: the client must not retry it
    BUSY = "busy"  # too many requests in flight: retry soon
    UNAVAILABLE = "unavailable"  # the database cannot take spans now: retry later


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
        # Only as many bodies are decoded as connections can stage them: the others wait
        # encoded, so memory holds at most that many decoded requests (a 16 MiB body of small
        # spans decodes to some 200 MiB).
        self._staging_slots = asyncio.Semaphore(staging.settings.connections)

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
        except StagingUnavailable as error:
            stats.problem("database_unavailable", error)
            return Outcome(Answer.UNAVAILABLE, _UNAVAILABLE)
        finally:
            self._in_flight -= 1

    async def _export(self, body: bytes, decode: Callable[[bytes], Decoded]) -> Outcome:
        staging = self._staging
        try:  # before decoding: a database that is away costs no decoding memory
            if staging.resting():
                raise StagingUnavailable("resting")
            await run_in_threadpool(staging.ready)
        except StagingUnavailable:
            staging.stats.add("unavailable_answers")
            return Outcome(Answer.UNAVAILABLE, _UNAVAILABLE)
        async with self._staging_slots:
            decoded = await run_in_threadpool(decode, body)
            if decoded.signal == "logs":
                staging.stats.add("logs_outside", decoded.outside)
                receipt = await run_in_threadpool(
                    staging.receive_logs, decoded.logs, decoded.wire, decoded.keys
                )
            else:
                receipt = await run_in_threadpool(staging.receive, decoded.spans, decoded.wire)
        rejected = decoded.rejected + receipt.rejected
        if not rejected:
            return Outcome(Answer.ACCEPTED, staged=receipt.staged)
        if decoded.signal == "logs":
            staging.stats.add("rejected_logs", rejected)
            reason = decoded.reason or "too many log records of a trace wait for their span"
        else:
            staging.stats.add("rejected_spans", rejected)
            reason = decoded.reason or "a trace over its span limit"
        return Outcome(Answer.ACCEPTED, reason, rejected, receipt.staged)


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
