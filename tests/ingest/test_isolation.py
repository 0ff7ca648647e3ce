"""One bad job or one failed statement never takes its neighbours or other clients down: a
statement PostgreSQL refuses for one job refuses that job's spans alone (``partial_success``,
counted), a lock held on one job answers that job's requests retryable while every other
request is taken, and collect pauses only for a database that is away."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import httpx
import psycopg
import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.trace import Tracer
from psycopg import sql
from psycopg.conninfo import make_conninfo
from starlette.applications import Starlette
from starlette.testclient import TestClient

from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.failures import Fault, fault
from otel_jobsteps._ingest.metrics import CollectMetrics
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.helpers import free_port
from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.receiver import one_job, receiving
from tests.ingest.requests import (
    PROTOBUF,
    logs_request_of,
    partial_success,
    post,
    rejected_log_records,
    request_of,
)
from tests.ingest.stories import Recording

# A statement of collect's own that fails for one job whatever it holds (the rows it derives
# are written as the processor's are: a row PostgreSQL refuses is dropped alone, counted).
POISON_LOGS = """
CREATE FUNCTION poison_logs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.trace_id = '{trace}' THEN RAISE EXCEPTION 'a poisoned record'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER poison_logs BEFORE INSERT ON otlp_log FOR EACH ROW EXECUTE FUNCTION poison_logs();
"""
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
STATEMENT_FAILURES = "otel_jobsteps_collect_statement_failures_total"
POISON = """
CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.job_id LIKE 'poison%' THEN RAISE EXCEPTION 'a poisoned job'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON otlp_job
    FOR EACH ROW EXECUTE FUNCTION poison();
"""


def _jobs(*job_ids: str, attempt: int = 1) -> Callable[[Tracer, str], None]:
    def story(tracer: Tracer, _: str) -> None:
        for job_id in job_ids:
            with tracer.start_as_current_span(
                "job", attributes={"job.domain": "d", "job.id": job_id, "job.attempt": attempt}
            ):
                with tracer.start_as_current_span("step", attributes={"job.step.key": "S"}):
                    pass

    return story


def test_a_statement_failing_for_one_job_refuses_that_job_alone(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        conn.execute(POISON)

    def story(tracer: Tracer, _: str) -> None:
        for job_id in ("innocent-1", "poison-1", "innocent-2"):
            one_job(tracer, domain="d", job_id=job_id)

    spans = recording.spans(story, "")
    with receiving(second_dsn) as receiver:
        reply = receiver.post(spans)
        again = receiver.post(spans)  # the exporter does not retry a 200: a client may
        refusals, pauses = receiver.count("statement_refusals"), receiver.count("database_pauses")

    assert (reply.status_code, again.status_code) == (200, 200)
    rejected, message = partial_success(reply)
    assert rejected >= 1
    assert "refused" in message
    assert "P0001" in message
    assert partial_success(again)[0] >= 1
    assert refusals >= 2
    assert pauses == 0
    assert table_rows(second_dsn, "poison-%") == ([], [])
    assert table_rows(second_dsn, "innocent-%") == table_rows(dsn, "innocent-%")
    assert len(table_rows(second_dsn, "innocent-%")[1]) == 2


def test_a_locked_job_answers_its_own_requests_retryable_and_no_one_else_waits(
    recording: Recording, second_dsn: str
) -> None:
    collect_dsn = make_conninfo(second_dsn, options="-c lock_timeout=200")
    first = recording.spans(_jobs("locked"), "")
    later = recording.spans(_jobs("locked", attempt=2), "")
    others = [recording.spans(_jobs(f"other-{n}"), "") for n in range(5)]
    grpc_port = free_port()
    with (
        receiving(collect_dsn, grpc_listen=f"127.0.0.1:{grpc_port}") as receiver,
        psycopg.connect(second_dsn) as holder,
        grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
    ):
        assert receiver.post(first).status_code == 200
        holder.execute("SELECT FROM otlp_job WHERE job_id = 'locked' FOR UPDATE")
        locked = receiver.post(later)
        answers = [receiver.post(spans).status_code for spans in others]
        resting, ready = receiver.staging.resting(), receiver.client.get("/readyz").status_code
        export: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(EXPORT)
        with pytest.raises(grpc.RpcError) as over_grpc:
            export(request_of(later).SerializeToString(), timeout=30)
        refused = receiver.post(later)  # a third time: its spans are refused, the rest taken
        holder.rollback()
        metrics = CollectMetrics(receiver.staging.stats, settled_at=time.monotonic)
        with TestClient(Starlette(routes=[metrics.route()])) as scrape:
            exposed = scrape.get("/metrics").text

    assert locked.status_code == 503
    assert locked.headers["Retry-After"] == "2"
    assert answers == [200] * 5
    assert (resting, ready) == (False, 200)
    assert over_grpc.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert refused.status_code == 200
    assert partial_success(refused)[0] >= 1
    assert _counter(exposed, "retry") == 2
    assert _counter(exposed, "refused") >= 1
    assert _counter(exposed, "paused") == 0
    for n in range(5):
        assert len(table_rows(second_dsn, f"other-{n}")[1]) == 1


def _counter(exposed: str, outcome: str) -> float:
    """otel_jobsteps_collect_statement_failures_total{outcome} in a /metrics text."""
    for line in exposed.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(STATEMENT_FAILURES) and f'outcome="{outcome}"' in name:
            return float(value)
    raise AssertionError(f"no {STATEMENT_FAILURES} {outcome} in {exposed}")


def test_a_read_only_database_is_away_for_everyone(recording: Recording, second_dsn: str) -> None:
    """What a failover to a standby gives: collect pauses (every request 503 for a moment)."""
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                sql.Identifier(name)
            )
        )
    spans = recording.spans(_jobs("read-only"), "")
    with receiving(second_dsn) as receiver:
        reply = receiver.post(spans)
        resting, pauses = receiver.staging.resting(), receiver.count("database_pauses")

    assert reply.status_code == 503
    assert (resting, pauses) == (True, 1)
    assert receiver.count("statement_retry_answers") == 0


@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("08006", Fault.AWAY),  # connection failure
        ("57P01", Fault.AWAY),  # admin shutdown
        ("25006", Fault.AWAY),  # read-only transaction
        ("53300", Fault.AWAY),  # too many connections
        ("55P03", Fault.CONTENTION),  # lock timeout
        ("57014", Fault.CONTENTION),  # statement timeout
        ("40P01", Fault.CONTENTION),  # deadlock
        ("22021", Fault.JOB),  # NUL in text
        ("54000", Fault.JOB),  # an index entry too large
        ("P0001", Fault.JOB),  # a trigger's exception
        ("42501", Fault.OTHER),  # permission denied: never refused, retried
        ("53100", Fault.OTHER),  # disk full
    ],
)
def test_a_failed_statement_is_told_by_its_sqlstate(sqlstate: str, expected: Fault) -> None:
    assert fault(psycopg.errors.lookup(sqlstate)("the message does not matter")) is expected


def test_no_answer_from_the_server_is_away() -> None:
    assert fault(psycopg.OperationalError("connection lost")) is Fault.AWAY


def test_a_settle_pass_that_waits_too_long_on_a_lock_does_not_pause_collect(
    recording: Recording, second_dsn: str
) -> None:
    collect_dsn = make_conninfo(second_dsn, options="-c lock_timeout=200")
    staging = Staging(CollectSettings(collect_dsn, settle_after_s=0.0, connections=1))
    try:
        body = request_of(recording.spans(_jobs("settling"), "")).SerializeToString()
        decoded = decode_protobuf(body)
        staging.receive(decoded.spans, decoded.wire)
        with psycopg.connect(second_dsn) as holder:
            holder.execute("SELECT FROM otlp_attempt WHERE job_id = 'settling' FOR UPDATE")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                staging.settle()
            resting, pauses = staging.resting(), staging.stats.get("database_pauses")
        assert staging.settle()[0] == 1  # the next pass
    finally:
        staging.close()

    assert (resting, pauses) == (False, 0)


def test_log_records_a_statement_fails_for_are_refused_alone(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    def story(tracer: Tracer, _: str) -> None:
        for job_id in ("logs-innocent", "logs-poison"):
            with tracer.start_as_current_span(
                "job", attributes={"job.domain": "d", "job.id": job_id, "job.attempt": 1}
            ):
                with tracer.start_as_current_span("step", attributes={"job.step.key": "S"}):
                    recording.logger.emit(
                        severity_number=SeverityNumber.WARN, body=f"a line of {job_id}"
                    )

    spans = recording.spans(story, "")
    poisoned = next(s for s in spans if s.name == "job" and b"logs-poison" in s.SerializeToString())
    with psycopg.connect(second_dsn, autocommit=True) as conn:  # its records only
        conn.execute(POISON_LOGS.format(trace=poisoned.trace_id.hex()))  # type: ignore[arg-type]
    records = logs_request_of(recording.logs()).SerializeToString()
    with receiving(second_dsn) as receiver:
        assert receiver.post(spans).status_code == 200
        reply = receiver.client.post("/v1/logs", content=records, headers=PROTOBUF)
        refusals = receiver.count("statement_refusals")

    assert reply.status_code == 200
    rejected, message = rejected_log_records(reply)
    assert rejected == 1
    assert "refused" in message
    assert refusals == 1
    assert table_rows(second_dsn, "logs-innocent") == table_rows(dsn, "logs-innocent")
    assert [row[4] for row in table_rows(dsn, "logs-innocent")[0]].count("LOG") == 1


def test_other_clients_are_answered_while_one_job_stays_locked(
    start_collect: CollectorFactory, recording: Recording, second_dsn: str
) -> None:
    """Issue 36's case, concurrent: one client retries a locked job's spans while another
    sends 30 requests for other jobs (before: most of them got 503, collect paused)."""
    collector = start_collect(make_conninfo(second_dsn, options="-c lock_timeout=200"))
    assert post(collector.traces_url, _body(recording.spans(_jobs("held"), ""))).status_code == 200
    poison = [_body(recording.spans(_jobs("held", attempt=n), "")) for n in range(2, 8)]
    others = [_body(recording.spans(_jobs(f"free-{n}"), "")) for n in range(30)]
    held_answers: list[int] = []
    done = threading.Event()

    def retry_the_locked_job() -> None:
        while not done.is_set():
            for body in poison:
                held_answers.append(post(collector.traces_url, body).status_code)

    with psycopg.connect(second_dsn) as holder:
        holder.execute("SELECT FROM otlp_job WHERE job_id = 'held' FOR UPDATE")
        retrier = threading.Thread(target=retry_the_locked_job)
        retrier.start()
        try:
            answers = [post(collector.traces_url, body).status_code for body in others]
        finally:
            done.set()
            retrier.join()
        holder.rollback()
    exposed = httpx.get(f"{collector.url}/metrics", timeout=10).text

    assert answers == [200] * 30
    assert 503 in held_answers
    assert _counter(exposed, "paused") == 0
    assert _counter(exposed, "retry") >= 1
    for n in range(30):
        assert len(table_rows(second_dsn, f"free-{n}")[1]) == 1


def _body(spans: list[Span]) -> bytes:
    return request_of(spans).SerializeToString()
