"""A 200 means durable: a receiver killed after answering loses nothing; while the database is
away the receiver answers 503 with Retry-After, and the exporter's retries land every span once."""

from __future__ import annotations

import signal
import threading
from datetime import timedelta

import psycopg
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from otel_jobsteps.attributes import JOB_ID
from otel_jobsteps.maintenance import sweep
from tests.faults.proxy import FaultProxy, Mode
from tests.helpers import wait_until
from tests.ingest.collector import CollectorFactory, refuses_connections, table_rows
from tests.ingest.outage import database_away, export_through_recovery
from tests.ingest.requests import post, request_of, start_markers
from tests.ingest.stories import Recording, seed_story


def test_spans_answered_200_survive_a_killed_receiver(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-kill")
    steps = [s for s in spans if not any(kv.key == JOB_ID for kv in s.attributes)]
    jobs = [s for s in spans if any(kv.key == JOB_ID for kv in s.attributes)]
    first = start_collect(second_dsn)
    assert post(first.traces_url, request_of(steps).SerializeToString()).status_code == 200
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL

    # What the killed receiver answered 200 for is in the staging table, waiting for its jobs.
    with psycopg.connect(second_dsn) as conn:
        (staged,) = conn.execute("SELECT count(*) FROM otlp_span").fetchone() or (0,)
    assert staged == len(steps)
    second = start_collect(second_dsn)
    assert post(second.traces_url, request_of(jobs).SerializeToString()).status_code == 200
    assert table_rows(second_dsn) == table_rows(dsn)


def test_sigterm_finishes_the_requests_in_flight(
    start_collect: CollectorFactory, proxy: FaultProxy, recording: Recording, dsn: str,
    second_dsn: str
) -> None:  # fmt: skip
    collector = start_collect(proxy.dsn_for(second_dsn))
    body = request_of(recording.spans(seed_story, "-term")).SerializeToString()
    # The request's first statement reaches the server; its answer is held back...
    proxy.blackhole_when(client_sends=b"otlp_trace")
    replies: list[int] = []
    sender = threading.Thread(
        target=lambda: replies.append(post(collector.traces_url, body).status_code)
    )
    sender.start()
    wait_until(lambda: proxy.mode is Mode.BLACKHOLE, what="the request to reach the database")
    collector.process.send_signal(signal.SIGTERM)  # ...when the receiver is told to stop
    # Released only once shutdown has begun (the listener is closed first), so the request is
    # finished by the graceful shutdown, not before the signal is noticed.
    wait_until(lambda: refuses_connections(collector.url), what="collect to stop accepting")
    proxy.set_mode(Mode.PASS)
    sender.join()
    assert replies == [200]
    assert collector.process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert table_rows(second_dsn) == table_rows(dsn)


def test_database_away_503_then_the_exporters_retries_land_once(
    start_collect: CollectorFactory, proxy: FaultProxy, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(proxy.dsn_for(second_dsn), "--retry-after", "1")
    spans = database_away(proxy, dsn, "-down")
    reply = post(collector.traces_url, request_of(spans).SerializeToString())
    assert reply.status_code == 503
    assert reply.headers["retry-after"] == "1"

    exporter = OTLPSpanExporter(endpoint=collector.traces_url, timeout=60)
    export_through_recovery(proxy, exporter, dsn, "-retried")
    assert table_rows(second_dsn, "%-retried%") == table_rows(dsn, "%-retried%")
    assert len(table_rows(second_dsn, "%-retried%")[0]) == 9


def test_a_commit_whose_answer_is_lost_is_not_applied_twice(
    start_collect: CollectorFactory, proxy: FaultProxy, recording: Recording, dsn: str,
    second_dsn: str
) -> None:  # fmt: skip
    collector = start_collect(proxy.dsn_for(second_dsn), "--retry-after", "1")
    spans = recording.spans(seed_story, "-lost")
    body = request_of(spans).SerializeToString()
    # The server commits; the receiver never hears it, answers 503; the client sends again.
    proxy.cut_when(server_sends=b"COMMIT\x00")
    assert post(collector.traces_url, body).status_code == 503
    assert proxy.cuts == 1
    reply = wait_until(
        lambda: (r := post(collector.traces_url, body)).status_code == 200 and r,
        what="the retried request to be taken",
    )
    assert reply.status_code == 200
    assert table_rows(second_dsn, "%-lost") == table_rows(dsn, "%-lost")


def test_a_step_swept_as_abandoned_takes_its_own_outcome_when_its_span_arrives(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-swept")
    collector = start_collect(second_dsn)
    markers = start_markers(spans)
    assert post(collector.traces_url, request_of(markers).SerializeToString()).status_code == 200
    swept = sweep(second_dsn, timedelta(microseconds=1))
    assert {s.step_key for s in swept} == {"SAVE"}  # attempt 2's SAVE was open: its worker "died"
    assert post(collector.traces_url, request_of(spans).SerializeToString()).status_code == 200
    assert table_rows(second_dsn, "%-swept") == table_rows(dsn, "%-swept")
