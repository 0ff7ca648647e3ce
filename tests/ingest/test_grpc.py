"""OTLP/gRPC against a running ``collect``: the Python gRPC exporter's spans give the processor's
rows; refusals carry OTLP's status codes (RetryInfo where the client should retry)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_jobsteps import JobStepsProcessor
from tests.faults.proxy import FaultProxy, Mode
from tests.helpers import free_port, wait_until
from tests.ingest.collector import (
    Collector,
    CollectorFactory,
    refuses_connections,
    run_collect,
    table_rows,
)
from tests.ingest.outage import database_away, export_through_recovery
from tests.ingest.requests import post, request_of
from tests.ingest.stories import Recording, seed_story, tell_all

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def channel(start_collect: CollectorFactory, second_dsn: str) -> Iterator[grpc.Channel]:
    """A channel to a receiver writing ``second_dsn``."""
    with grpc.insecure_channel(start_collect(second_dsn).grpc_target) as opened:
        yield opened


@pytest.mark.parametrize(
    "compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip], ids=["plain", "gzip"]
)
def test_the_grpc_exporters_story_gives_the_processors_rows(
    start_collect: CollectorFactory, dsn: str, second_dsn: str, compression: grpc.Compression
) -> None:
    collector = start_collect(second_dsn)
    exporter = OTLPSpanExporter(
        endpoint=collector.grpc_target, insecure=True, compression=compression
    )
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(dsn))
    # Small batches: the spans of one trace arrive split over several requests.
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=3))
    tell_all(provider.get_tracer("tests"))
    assert provider.force_flush(60_000)
    provider.shutdown()

    live_events, live_logs = table_rows(dsn)
    assert (len(live_events), len(live_logs)) == (9, 4)  # the stories' rows, all there
    assert table_rows(second_dsn) == (live_events, live_logs)


def test_an_export_that_does_not_decode_is_invalid_argument(channel: grpc.Channel) -> None:
    export = channel.unary_unary(EXPORT)  # raw bytes, as a broken client would send
    with pytest.raises(grpc.RpcError) as raised:
        export(b"\x0a\x05ab", timeout=30)  # a field longer than the message
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a protobuf ExportTraceServiceRequest" in (raised.value.details() or "")


def test_rejected_spans_are_a_partial_success(channel: grpc.Channel, recording: Recording) -> None:
    spans = recording.spans(seed_story, "-partial")
    spans[0].trace_id = b"\x01" * 15  # one span with an id of the wrong length
    response = TraceServiceStub(channel).Export(request_of(spans), timeout=30)
    assert response.partial_success.rejected_spans == 1
    assert "16 bytes" in response.partial_success.error_message


def _retry_delay_s(error: grpc.RpcError) -> tuple[int, int]:
    """The RetryInfo delay in the status details and in the Python exporter's trailer."""
    trailers = dict(error.trailing_metadata() or ())
    status = Status.FromString(trailers["grpc-status-details-bin"])
    (detail,) = status.details
    retry = RetryInfo()
    assert detail.Unpack(retry)
    assert status.code == error.code().value[0]
    python_retry = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    return retry.retry_delay.seconds, python_retry.retry_delay.seconds


def test_database_away_unavailable_with_retry_info_then_every_span_once(
    start_collect: CollectorFactory, proxy: FaultProxy, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(proxy.dsn_for(second_dsn), "--retry-after", "1")
    spans = database_away(proxy, dsn, "-down")
    with grpc.insecure_channel(collector.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            TraceServiceStub(channel).Export(request_of(spans), timeout=30)
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    assert _retry_delay_s(raised.value) == (1, 1)

    exporter = OTLPSpanExporter(endpoint=collector.grpc_target, insecure=True, timeout=60)
    export_through_recovery(proxy, exporter, dsn, "-retried")
    assert table_rows(second_dsn, "%-retried%") == table_rows(dsn, "%-retried%")
    assert len(table_rows(second_dsn, "%-retried%")[0]) == 9


def test_over_the_in_flight_bound_shared_with_http_resource_exhausted_with_retry_info(
    start_collect: CollectorFactory, proxy: FaultProxy, recording: Recording, dsn: str,
    second_dsn: str
) -> None:  # fmt: skip
    collector = start_collect(proxy.dsn_for(second_dsn))
    bodies = [
        request_of(recording.spans(seed_story, f"-busy{n}")).SerializeToString() for n in range(20)
    ]
    export = request_of(recording.spans(seed_story, "-busy-grpc"))
    # The database stops answering once the first request reaches it: requests pile up.
    proxy.blackhole_when(client_sends=b"otlp_trace")
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = [pool.submit(post, collector.traces_url, body) for body in bodies]
        wait_until(lambda: proxy.mode is Mode.BLACKHOLE, what="a request to reach the database")
        # 16 HTTP requests are in flight once one is told 429; gRPC's export counts in the same.
        wait_until(
            lambda: any(r.done() and r.result().status_code == 429 for r in replies),
            what="collect to tell an HTTP client to back off",
        )
        with grpc.insecure_channel(collector.grpc_target) as channel:
            stub = TraceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as raised:
                stub.Export(export, timeout=30)
            proxy.set_mode(Mode.PASS)
            assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert _retry_delay_s(raised.value) == (1, 1)
            # As an exporter does after the RetryInfo delay.
            wait_until(lambda: _accepted(stub, export), what="the export to be taken")
        statuses = [reply.result().status_code for reply in replies]
    for body, status in zip(bodies, statuses, strict=True):
        if status != 200:  # as an exporter does after Retry-After
            wait_until(
                lambda body=body: post(collector.traces_url, body).status_code == 200,
                what="a retried request to be taken",
            )
    assert table_rows(second_dsn, "%-busy%") == table_rows(dsn, "%-busy%")


def test_sigterm_finishes_the_exports_in_flight(
    start_collect: CollectorFactory, proxy: FaultProxy, recording: Recording, dsn: str,
    second_dsn: str
) -> None:  # fmt: skip
    collector = start_collect(proxy.dsn_for(second_dsn))
    request = request_of(recording.spans(seed_story, "-term"))
    # The export's first statement reaches the server; its answer is held back...
    proxy.blackhole_when(client_sends=b"otlp_trace")
    with grpc.insecure_channel(collector.grpc_target) as channel:
        call = TraceServiceStub(channel).Export.future(request, timeout=60)
        wait_until(lambda: proxy.mode is Mode.BLACKHOLE, what="the export to reach the database")
        collector.process.send_signal(signal.SIGTERM)  # ...when the receiver is told to stop
        # Released once the gRPC listener is closed too (HTTP's closes first), so the export is
        # finished by the graceful shutdown, not before the signal is noticed.
        grpc_url = f"http://{collector.grpc_target}"
        wait_until(lambda: refuses_connections(grpc_url), what="collect to stop accepting")
        proxy.set_mode(Mode.PASS)
        assert call.exception() is None
    assert collector.process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert table_rows(second_dsn, "%-term") == table_rows(dsn, "%-term")


def test_an_export_over_the_body_limit_is_refused_for_good(
    start_collect: CollectorFactory, second_dsn: str, recording: Recording
) -> None:
    collector = start_collect(second_dsn, "--max-body-bytes", "1024")
    request = request_of(recording.spans(seed_story, "-big"))
    assert request.ByteSize() > 1024
    with grpc.insecure_channel(collector.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            TraceServiceStub(channel).Export(request, timeout=30)
    # RESOURCE_EXHAUSTED without RetryInfo: OTLP clients do not retry it.
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "grpc-status-details-bin" not in dict(raised.value.trailing_metadata() or ())


def _accepted(stub: TraceServiceStub, request: ExportTraceServiceRequest) -> bool:
    error = stub.Export.future(request, timeout=30).exception()
    if error is None:
        return True
    assert isinstance(error, grpc.RpcError)
    assert error.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)
    return False


_LISTEN, _ESTABLISHED = "0A", "01"  # TCP states in /proc/net/tcp


def _sockets(pid: int | None = None) -> list[tuple[int, str]]:
    """(local port, TCP state) of every TCP socket, or of ``pid``'s only."""
    inodes = None
    if pid is not None:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(FileNotFoundError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if inodes is None or fields[9] in inodes:
                    found.append((int(fields[1].rsplit(":", 1)[1], 16), fields[3]))
    return found


def test_grpc_listen_off_opens_no_port(start_collect: CollectorFactory, second_dsn: str) -> None:
    collector: Collector = start_collect(second_dsn, "--grpc-listen", "off")
    http_port = int(collector.url.rsplit(":", 1)[1])
    listening = {port for port, state in _sockets(collector.process.pid) if state == _LISTEN}
    assert listening == {http_port}


def test_workers_share_the_grpc_port(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(second_dsn, "--workers", "2")
    port = collector.grpc_port
    wait_until(
        lambda: _sockets().count((port, _LISTEN)) == 2, what="both workers to listen for gRPC"
    )
    # 20 connections (each channel its own: grpc shares one between channels by default): the
    # kernel spreads them over the two listeners (all on one: p = 2**-19).
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(collector.grpc_target, options=own) for _ in range(20)]
    try:
        for n, channel in enumerate(channels):
            request = request_of(recording.spans(seed_story, f"-workers{n}"))
            TraceServiceStub(channel).Export(request, timeout=30)
        with open(f"/proc/{collector.process.pid}/task/{collector.process.pid}/children") as f:
            children = [int(child) for child in f.read().split()]
        served = [_sockets(child).count((port, _ESTABLISHED)) for child in children]
    finally:
        for channel in channels:
            channel.close()
    assert sorted(count > 0 for count in served) == [False] * (len(served) - 2) + [True, True]
    assert table_rows(second_dsn, "%-workers%") == table_rows(dsn, "%-workers%")


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "reuseport"])
def test_a_taken_grpc_port_is_a_clear_error(second_dsn: str, reuse_port: bool) -> None:
    with socket.socket() as holder:
        # SO_REUSEPORT as another receiver's gRPC server binds: grpc would share it silently.
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(reuse_port))
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run_collect(
            second_dsn, "--listen", f"127.0.0.1:{free_port()}", "--grpc-listen", f"127.0.0.1:{port}"
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"otel-jobsteps: error: cannot listen on 127.0.0.1:{port}: the port is in use by another"
        " process (stop it or pass another --grpc-listen)"
    ]
