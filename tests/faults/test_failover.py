"""A failover under both doors: the primary of a synchronous pair dies (``pg_ctl stop -m
immediate``) while the live processor and collect write, the standby is promoted, and with the
multi-host DSN operators are told to use (docs/operations.md, Failover) nothing acknowledged is
lost, nothing is written twice, both doors write again within 30 s, and collect's /readyz is
503 while no primary answers. Pointed at the standby alone, collect's readiness says it is a
standby and serve's is ready (it only reads).

The servers are the test's own, so the test runs once: in the suite's run without
OTEL_JOBSTEPS_TEST_DSN (CI runs the suite three times).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TYPE,
    JobStepsProcessor,
    job_attempt,
    migrate,
    step,
)
from otel_jobsteps._http.health import COLLECT_RIGHTS, SERVE_RIGHTS, Readiness
from tests.faults.replication import Server, replicated_pair
from tests.helpers import wait_until
from tests.ingest.collector import CollectorFactory
from tests.ingest.requests import PROTOBUF, proto_spans, request_of

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("OTEL_JOBSTEPS_TEST_DSN")),
    reason="its servers are its own: it runs once, in the suite's run without a DSN",
)

DOMAIN = "failover"
BACK_WITHIN_S = 30.0
PACE_S = 0.05  # between two jobs of a door: a steady load, not a tight loop on two shared cores


@dataclass
class Door:
    """What one door was sent and what it acknowledged, with when (monotonic seconds)."""

    name: str
    sent: list[str] = field(default_factory=list)
    acknowledged: list[tuple[str, float]] = field(default_factory=list)
    refusals: int = 0  # force_flush's False, collect's answers but 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(self, job_ids: list[str]) -> None:
        now = time.monotonic()
        with self.lock:
            self.acknowledged += [(job_id, now) for job_id in job_ids]

    def acked_after(self, moment: float) -> float | None:
        """When the first acknowledgement after ``moment`` came, if one did."""
        with self.lock:
            return next((at for _, at in self.acknowledged if at > moment), None)

    def count(self) -> int:
        with self.lock:
            return len(self.acknowledged)


def _processor_door(processor: JobStepsProcessor, door: Door, stop: threading.Event) -> None:
    """Jobs through the live processor: force_flush's True acknowledges every job before it."""
    tracer = TracerProvider()
    tracer.add_span_processor(processor)
    unacknowledged: list[str] = []
    while not stop.is_set():
        job_id = f"p{len(door.sent)}"
        with job_attempt(DOMAIN, job_id, "failover", tracer=tracer.get_tracer("p")):
            with step("WORK", tracer=tracer.get_tracer("p")):
                pass
        door.sent.append(job_id)
        unacknowledged.append(job_id)
        if processor.force_flush(1000):
            door.acked(unacknowledged)
            unacknowledged = []
        else:
            door.refusals += 1
        stop.wait(PACE_S)


def _job_request(job_id: str) -> bytes:
    """One job's spans (job span, one step) as an OTLP/HTTP protobuf body."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("c")
    job = {JOB_DOMAIN: DOMAIN, JOB_ID: job_id, JOB_TYPE: "failover", JOB_ATTEMPT: 1}
    with tracer.start_as_current_span("job", attributes=job):
        with tracer.start_as_current_span("WORK", attributes={JOB_STEP_KEY: "WORK"}):
            pass
    provider.shutdown()
    return request_of(proto_spans(exporter.get_finished_spans())).SerializeToString()


def _collect_door(url: str, door: Door, stop: threading.Event) -> None:
    """Jobs through collect, each retried until answered 200, as an exporter retries a 503."""
    with httpx.Client(timeout=5) as client:
        while not stop.is_set():
            job_id = f"c{len(door.sent)}"
            body = _job_request(job_id)
            door.sent.append(job_id)
            while not stop.is_set():
                try:
                    status = client.post(url, content=body, headers=PROTOBUF).status_code
                except httpx.TransportError:
                    status = 0
                if status == 200:
                    door.acked([job_id])
                    break
                door.refusals += 1
                stop.wait(PACE_S)
            stop.wait(PACE_S)


def _readyz(url: str) -> int:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code
    except httpx.TransportError:
        return 0


@pytest.fixture
def pair() -> Iterator[tuple[Server, Server]]:
    with replicated_pair() as servers:
        yield servers


def _rows_per_job(dsn: str, table: str, where: str) -> dict[str, int]:
    query = f"SELECT job_id, count(*) FROM {table} WHERE domain = %s{where} GROUP BY job_id"
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(query, (DOMAIN,)).fetchall())  # type: ignore[arg-type]


def _written_once(dsn: str, door: Door) -> None:
    """Every acknowledged job has its STEP row and its final row; no job has two."""
    steps = _rows_per_job(dsn, "job_event", " AND type = 'STEP'")
    finals = _rows_per_job(dsn, "job_log", "")
    acknowledged = [job_id for job_id, _ in door.acknowledged]
    lost = [job_id for job_id in acknowledged if (steps.get(job_id), finals.get(job_id)) != (1, 1)]
    twice = {job_id: n for job_id, n in [*steps.items(), *finals.items()] if n > 1}
    assert (door.name, lost, twice) == (door.name, [], {})


def test_a_failover_loses_nothing_acknowledged_and_both_doors_come_back(
    pair: tuple[Server, Server], start_collect: CollectorFactory
) -> None:
    primary, standby = pair
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE jobs")
    migrate(primary.dsn("jobs"))
    # Pointed at the standby alone, serve is ready (it reads), collect is not (it cannot write).
    serve_ready = Readiness(standby.dsn("jobs"), schema="public", rights=SERVE_RIGHTS)
    serve_ready.cache_s = 0.0  # asked until the standby has replayed the migration
    wait_until(lambda: serve_ready.problem() is None, what="serve ready on the standby")
    on_standby = Readiness(standby.dsn("jobs"), schema="public", rights=COLLECT_RIGHTS).problem()
    assert on_standby is not None
    assert on_standby.startswith("the database is a standby in recovery: collect writes to")
    # The DSN of docs/operations.md, Failover: both hosts, whichever takes writes.
    dsn = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname=jobs user=postgres"
        " target_session_attrs=read-write connect_timeout=2"
    )
    collector = start_collect(dsn, "--grpc-listen", "off")
    processor = JobStepsProcessor(dsn, connect_timeout_s=2, shutdown_timeout_ms=10_000)
    doors = Door("processor"), Door("collect")
    stop = threading.Event()
    writers = [
        threading.Thread(target=_processor_door, args=(processor, doors[0], stop)),
        threading.Thread(target=_collect_door, args=(collector.traces_url, doors[1], stop)),
    ]
    for writer in writers:
        writer.start()
    try:
        wait_until(lambda: all(d.count() >= 5 for d in doors), what="both doors to write")

        refused = [d.refusals for d in doors]
        primary.stop_now()
        stopped = time.monotonic()
        wait_until(lambda: _readyz(collector.url) == 503, what="/readyz 503 without a primary")
        unready = time.monotonic()
        # Each door meets the outage (a job not acknowledged) before the standby takes over.
        wait_until(
            lambda: all(d.refusals > n for d, n in zip(doors, refused, strict=True)),
            what="both doors to be refused without a primary",
        )
        assert _readyz(collector.url) == 503
        promoted_at = time.monotonic()
        standby.promote()
        promoted = time.monotonic()

        def left() -> float:  # each door is back within BACK_WITHIN_S of the promotion
            return BACK_WITHIN_S - (time.monotonic() - promoted)

        back = {
            door.name: wait_until(
                lambda door=door: door.acked_after(promoted),
                what=f"{door.name} to write after the promotion",
                timeout_s=left(),
            )
            for door in doors
        }
        ready = wait_until(
            lambda: _readyz(collector.url) == 200 and time.monotonic(),
            what="/readyz 200 after the promotion",
            timeout_s=left(),
        )
        settled = [d.count() for d in doors]
        wait_until(
            lambda: all(d.count() >= n + 5 for d, n in zip(doors, settled, strict=True)),
            what="both doors to go on writing",
        )
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=30)
    assert processor.force_flush(10_000)
    processor.shutdown()

    print(  # the measured recovery, for docs/operations.md (pytest -s shows it)
        f"failover: /readyz 503 {unready - stopped:.2f}s after the stop, promoted"
        f" {promoted_at - stopped:.2f}s after it (pg_ctl promote: {promoted - promoted_at:.2f}s);"
        f" then the processor wrote again in {back['processor'] - promoted:.2f}s, collect in"
        f" {back['collect'] - promoted:.2f}s, /readyz 200 in {ready - promoted:.2f}s;"
        + "".join(
            f" {d.name}: {len(d.acknowledged)} of {len(d.sent)} jobs acknowledged,"
            f" {d.refusals} refusals;"
            for d in doors
        )
    )
    for door in doors:
        _written_once(standby.dsn("jobs"), door)
