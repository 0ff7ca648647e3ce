"""Slow clients cannot starve ``collect``: a body still arriving holds no in-flight slot, and a
body slower than ``--body-timeout`` is answered 408 and its connection closed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from tests.helpers import wait_until
from tests.ingest.collector import Collector, CollectorFactory, table_rows
from tests.ingest.requests import post, request_of
from tests.ingest.stories import Recording, seed_story

SLOW_CLIENTS = 20  # more than the in-flight bound (16 with 4 connections)
TRICKLE_EVERY_S = 0.05  # a body byte this often: the pace of the slow clients, not a wait


def _slow_request(
    collector: Collector, sent: bytes = b"\n", length: int = 1_000_000
) -> socket.socket:
    """A connection that sent its headers and the start of a body it never finishes."""
    host, port = collector.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/x-protobuf\r\n"
        b"content-length: %d\r\n\r\n%s" % (length, sent)
    )
    return sock


@contextlib.contextmanager
def _trickling(sockets: list[socket.socket]) -> Iterator[None]:
    """Each socket sends a body byte every `TRICKLE_EVERY_S` until the block ends (or it is
    closed by the receiver)."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(TRICKLE_EVERY_S):
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.send(b"\x00")

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_real_requests_are_answered_while_slow_ones_trickle(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(second_dsn, "--body-timeout", "10m")
    bodies = [
        request_of(recording.spans(seed_story, f"-real{n}")).SerializeToString() for n in range(10)
    ]
    slow = [_slow_request(collector) for _ in range(SLOW_CLIENTS)]
    try:
        with _trickling(slow):
            statuses = [post(collector.traces_url, body).status_code for body in bodies]
    finally:
        for sock in slow:
            sock.close()
    assert statuses == [200] * len(bodies)
    assert table_rows(second_dsn, "%-real%") == table_rows(dsn, "%-real%")
    assert len(table_rows(second_dsn, "%-real%")[1]) == 2 * len(bodies)  # two attempts each


def _answer(sock: socket.socket) -> bytes:
    """What the receiver sends until it closes the connection."""
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_a_body_slower_than_the_timeout_is_answered_408_and_closed(
    start_collect: CollectorFactory, second_dsn: str
) -> None:
    collector = start_collect(second_dsn, "--body-timeout", "1s")
    started = time.monotonic()
    with _slow_request(collector) as sock:
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"the body took over 1 s to arrive" in answer
    assert time.monotonic() - started >= 1.0  # not before the deadline


def test_the_deadline_is_for_the_whole_body_even_while_bytes_keep_coming(
    start_collect: CollectorFactory, second_dsn: str
) -> None:
    collector = start_collect(second_dsn, "--body-timeout", "1s")
    started = time.monotonic()
    with _slow_request(collector) as sock, _trickling([sock]):
        # Bytes still arriving when the receiver closes are unread: the kernel then answers
        # with a reset, which may overtake the 408. Either way the connection ends, not before
        # the deadline.
        try:
            answer = _answer(sock)
        except ConnectionResetError:
            answer = b""
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started >= 1.0


def _empty_request(size: int) -> bytes:
    """An ExportTraceServiceRequest of ``size`` bytes and no spans (one unknown field)."""
    padding = size - 3
    return bytes([0x7A, 0x80 | (padding & 0x7F), padding >> 7]) + bytes(padding)


def test_the_bytes_bodies_hold_at_once_are_bounded(
    start_collect: CollectorFactory, second_dsn: str
) -> None:
    # 16 requests in flight of at most 1 KiB: bodies may hold 16 KiB at once.
    collector = start_collect(second_dsn, "--max-body-bytes", "1024", "--body-timeout", "10m")
    stalled = [_slow_request(collector, bytes(1000), length=1024) for _ in range(20)]
    try:
        for sock in stalled:
            sock.setblocking(False)

        def refused() -> list[bytes]:
            answers = []
            for sock in stalled:
                with contextlib.suppress(BlockingIOError):
                    answers.append(sock.recv(65536, socket.MSG_PEEK))
            return answers

        # 16 of them hold 16,000 bytes; the other 4 would pass the bound: told to back off.
        answers = wait_until(lambda: len(found := refused()) == 4 and found, what="four 429s")
        assert all(answer.startswith(b"HTTP/1.1 429 ") for answer in answers)
        assert post(collector.traces_url, _empty_request(600)).status_code == 429
    finally:
        for sock in stalled:
            sock.close()
    # Their share is given back when they go.
    wait_until(
        lambda: post(collector.traces_url, _empty_request(600)).status_code == 200,
        what="the stalled bodies' bytes to be released",
    )
