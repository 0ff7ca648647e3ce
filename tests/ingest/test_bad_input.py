"""Bad input gets a clear 4xx; nothing else in the same request or in others is lost."""

from __future__ import annotations

import gzip
import threading

import httpx
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.faults.proxy import FaultProxy, Mode
from tests.helpers import wait_until
from tests.ingest.collector import Collector, CollectorFactory, table_rows
from tests.ingest.requests import (
    PROTOBUF,
    as_otlp_json,
    partial_success,
    post,
    request_of,
)
from tests.ingest.stories import Recording, seed_story


def test_undecodable_bodies_are_400_and_the_receiver_stays_up(
    start_collect: CollectorFactory, second_dsn: str
) -> None:
    collector = start_collect(second_dsn, "--max-body-bytes", "65536")
    url = collector.traces_url
    bad = [
        (b"\xff\xff\xff\xff", PROTOBUF, 400),
        (b"{not json", {"content-type": "application/json"}, 400),
        (b"[1, 2]", {"content-type": "application/json"}, 400),
        (b'{"resourceSpans": "x"}', {"content-type": "application/json"}, 400),
        (b"not gzip", {**PROTOBUF, "content-encoding": "gzip"}, 400),
        (b"", {**PROTOBUF, "content-encoding": "br"}, 400),
        (b"x", {"content-type": "text/plain"}, 415),
        (b"x", {}, 415),
        (b"x" * 70_000, PROTOBUF, 413),
        # A gzip bomb: 64 KiB allowed, a few hundred bytes that inflate to 10 MB.
        (gzip.compress(b"\0" * 10_000_000), {**PROTOBUF, "content-encoding": "gzip"}, 413),
    ]
    for body, headers, status in bad:
        reply = post(url, body, headers)
        assert reply.status_code == status, (body[:20], reply.content)
        assert reply.content  # a google.rpc.Status saying why
    assert httpx.get(url).status_code == 405
    assert post(url, request_of([]).SerializeToString()).status_code == 200
    assert collector.process.poll() is None


def test_bad_spans_are_rejected_one_by_one_and_the_rest_is_kept(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(second_dsn)
    spans = recording.spans(seed_story, "-bad")
    wrong = []
    for trace_id, span_id in ((b"\x01" * 15, b"\x02" * 8), (b"\x01" * 16, b"\x02" * 9),
                              (bytes(16), b"\x02" * 8)):  # fmt: skip
        span = Span()
        span.CopyFrom(spans[0])
        span.trace_id, span.span_id = trace_id, span_id
        wrong.append(span)
    hostile = Span()
    hostile.CopyFrom(spans[-1])  # a job span of another job, with hostile values
    hostile.trace_id = b"\x07" * 16
    for pair in hostile.attributes:
        if pair.key == "job.id":
            pair.value.string_value = "evil\x00'; DROP TABLE job_log; --"
        elif pair.key == "job.type":
            pair.value.string_value = "\u202e<b>" + "x" * 100_000
    reply = post(collector.traces_url, request_of([*wrong, *spans, hostile]).SerializeToString())
    assert reply.status_code == 200
    rejected, message = partial_success(reply)
    assert rejected == 3
    assert "ids" in message
    assert table_rows(second_dsn, "%-bad") == table_rows(dsn, "%-bad")
    (log,) = table_rows(second_dsn, "evil%")[1]  # values as parameters, NUL replaced, cut
    assert log[1] == "evil\ufffd'; DROP TABLE job_log; --"
    assert len(log[2].encode()) == 512  # the type, cut at 512 bytes (\u202e takes 3)


def test_json_bodies_plain_and_gzip_give_the_same_rows(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(second_dsn)
    plain = recording.spans(seed_story, "-json")
    zipped = recording.spans(seed_story, "-gzjson")
    json_type = {"content-type": "application/json"}
    reply = post(collector.traces_url, as_otlp_json(request_of(plain)), json_type)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {}
    body = gzip.compress(as_otlp_json(request_of(zipped)))
    reply = post(collector.traces_url, body, {**json_type, "content-encoding": "gzip"})
    assert reply.status_code == 200
    # Two gzip members concatenated are one body (as gzip writes appended data), not its half.
    text = as_otlp_json(request_of(recording.spans(seed_story, "-gz2json")))
    body = gzip.compress(text[: len(text) // 2]) + gzip.compress(text[len(text) // 2 :])
    reply = post(collector.traces_url, body, {**json_type, "content-encoding": "gzip"})
    assert reply.status_code == 200
    for suffix in ("%-json", "%-gzjson", "%-gz2json"):
        assert table_rows(second_dsn, suffix) == table_rows(dsn, suffix)
        assert len(table_rows(second_dsn, suffix)[0]) == 5  # 4 steps, 1 event


def test_a_flood_is_told_to_back_off_and_loses_nothing(
    start_collect: CollectorFactory, proxy: FaultProxy, recording: Recording, dsn: str,
    second_dsn: str
) -> None:  # fmt: skip
    collector: Collector = start_collect(proxy.dsn_for(second_dsn))
    bodies = [
        request_of(recording.spans(seed_story, f"-flood{n}")).SerializeToString() for n in range(40)
    ]
    # The database stops answering once the first request reaches it: requests pile up.
    proxy.blackhole_when(client_sends=b"otlp_trace")
    answers: dict[int, int] = {}
    timed_out = 0  # the client gave up waiting (a slow machine): it sends again, as below

    def send(number: int) -> None:
        try:
            answers[number] = post(collector.traces_url, bodies[number]).status_code
        except httpx.TimeoutException:
            answers[number] = timed_out

    threads = [threading.Thread(target=send, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    # First the black hole, then the 429: on a slow machine 16 requests can be in flight before
    # any reaches the database, and a black hole armed after PASS would never be lifted.
    wait_until(lambda: proxy.mode is Mode.BLACKHOLE, what="a request to reach the database")
    wait_until(lambda: 429 in answers.values(), what="collect to tell a client to back off")
    proxy.set_mode(Mode.PASS)
    for thread in threads:
        thread.join()
    # Told to back off: 429 once too many requests wait; 503 if a connection the database
    # left unanswered timed out first (a slow machine). Nothing else, and nothing lost.
    assert set(answers.values()) <= {200, 429, 503, timed_out}
    for number, status in answers.items():
        if status != 200:  # as an exporter does after Retry-After
            wait_until(
                lambda n=number: post(collector.traces_url, bodies[n]).status_code == 200,
                what=f"request {number} accepted on a retry",
            )
    assert table_rows(second_dsn, "%-flood%") == table_rows(dsn, "%-flood%")
    assert len(table_rows(second_dsn, "%-flood%")[1]) == 2 * len(bodies)
    assert collector.process.poll() is None
