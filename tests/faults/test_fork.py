"""Prefork pools fork while the processor is busy: every child must come out of the fork alive.

A parent thread runs jobs against an unreachable database with a small queue, so drops are
being counted (the stats lock is taken all the time) and the writer is retrying when the
parent forks, again and again. Each child runs a job of its own on a fresh writer; a child
that hangs in the after-fork hook never exits, and the test says how many did not.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import psycopg
import pytest
from opentelemetry import trace

from otel_jobsteps import job_attempt, progress, step
from tests.faults.proxy import FaultProxy, Mode
from tests.faults.support import DOMAIN, Bridge, BridgeFactory, stat
from tests.helpers import rows, wait_until, writer_processes

FORKS = 150
AT_ONCE = 8  # children alive at a time: a shared machine, and each one is a whole pytest
CHILD_DEADLINE_S = 20.0
CHILD_OK, CHILD_FAILED = 0, 3


def _run_child(b: Bridge) -> int:
    """In the child: one job, then the child's own writer must take its commands."""
    with job_attempt(DOMAIN, f"child-{os.getpid()}", "t", tracer=b.tracer):
        with step("CHILD", tracer=b.tracer):
            progress(child=os.getpid())
    try:  # two starts and two ends, progress maybe merged
        wait_until(
            lambda: stat(b.processor, "commands") >= 4,
            what="the child's writer",
            timeout_s=CHILD_DEADLINE_S / 2,
        )
    except AssertionError:
        return CHILD_FAILED
    dropped = [k for k in b.processor.stats() if k.startswith("dropped_")]
    return CHILD_FAILED if dropped else CHILD_OK


def _room_for_one_more(running: dict[int, float], exits: dict[int, int]) -> bool:
    """Wait until fewer than AT_ONCE children run; False if one ran past its deadline."""
    while len(running) >= AT_ONCE:
        _reap(running, exits)
        if time.monotonic() - min(running.values(), default=time.monotonic()) > CHILD_DEADLINE_S:
            return False
        time.sleep(0.001)
    return True


def _reap(running: dict[int, float], exits: dict[int, int]) -> None:
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exits[pid] = os.waitstatus_to_exitcode(status)
            del running[pid]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_every_forked_child_comes_out_alive_under_load(
    bridge: BridgeFactory, proxy: FaultProxy
) -> None:
    proxy.set_mode(Mode.REFUSE)
    b = bridge(max_queue_size=1000)
    stop = threading.Event()

    def load() -> None:
        n = 0
        while not stop.is_set():
            with job_attempt(DOMAIN, f"load-{n}", "t", tracer=b.tracer), step("S", tracer=b.tracer):
                progress(n=n)
            n += 1

    loader = threading.Thread(target=load, name="load")
    loader.start()
    running: dict[int, float] = {}  # pid -> when it was forked
    exits: dict[int, int] = {}
    try:
        wait_until(lambda: stat(b.processor, "dropped_SpanStarted"), what="a full queue")
        for _ in range(FORKS):
            if not _room_for_one_more(running, exits):
                break  # a hung child: stop forking, report below
            pid = os.fork()
            if pid == 0:
                code = CHILD_FAILED
                try:
                    code = _run_child(b)
                finally:
                    os._exit(code)
            running[pid] = time.monotonic()
        stop.set()
        deadline = time.monotonic() + CHILD_DEADLINE_S
        while running and time.monotonic() < deadline:
            _reap(running, exits)
            time.sleep(0.005)
    finally:
        stop.set()
        loader.join(10)
        hung = sorted(running)
        for pid in hung:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert hung == [], f"{len(hung)} forked children never returned"
    assert len(exits) == FORKS
    assert set(exits.values()) == {CHILD_OK}, exits
    assert stat(b.processor, "write_failed") >= 1  # the parent was retrying all along


def _child_job(b: Bridge, *, kill_own_writer: bool) -> int:
    """In a child forked inside the parent's RENDER: its own job, its writer process SIGKILLed
    between two steps if asked; then the inherited RENDER span is ended here too (a child that
    returns through the parent's with-blocks), which must write nothing."""
    tracer, processor = b.tracer, b.processor
    render = trace.get_current_span()
    with job_attempt(DOMAIN, "child", "t", tracer=tracer):
        with step("A", tracer=tracer):
            pass
        if not processor.force_flush(10_000):
            return 2
        if kill_own_writer:
            (own,) = writer_processes()  # the parent's is not this process's child
            os.kill(own, signal.SIGKILL)
            wait_until(
                lambda: processor.stats().get("writer_process_exited"), what="the death noticed"
            )
        with step("B", tracer=tracer):
            progress(done=True)
    render.end()
    return CHILD_OK if processor.force_flush(10_000) else 3


@pytest.mark.parametrize(
    ("writer", "kill_own_writer"),
    [
        pytest.param("thread", False, id="writer-thread"),
        pytest.param("process", True, id="writer-process-restarted-in-the-child"),
    ],
)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_child_forked_inside_a_job_writes_its_own_and_leaves_the_parents(
    bridge: BridgeFactory, conn: psycopg.Connection[Any], writer: str, kill_own_writer: bool
) -> None:
    """Issue 22, the restarts after a fork: the child's writer (thread, or writer process,
    restarted there) starts with nothing of the parent's open spans (they are the parent's to
    write) and is told only its own when its writer process is replaced."""
    b = bridge(writer=writer, shutdown_timeout_ms=10_000)
    with job_attempt(DOMAIN, "parent", "t", tracer=b.tracer):
        with step("FETCH", tracer=b.tracer):
            pass
        with step("RENDER", tracer=b.tracer):
            progress(pct=10)
            assert b.processor.force_flush(10_000)
            pid = os.fork()
            if pid == 0:
                code = CHILD_FAILED
                try:
                    code = _child_job(b, kill_own_writer=kill_own_writer)
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == CHILD_OK
            progress(pct=90)
    assert b.processor.force_flush(10_000)

    steps = "SELECT job_id, step_key, step_status, detail FROM job_event ORDER BY job_id, id"
    assert rows(conn, steps) == [
        ("child", "A", "COMPLETED", None),
        ("child", "B", "COMPLETED", {"done": True}),
        ("parent", "FETCH", "COMPLETED", None),
        ("parent", "RENDER", "COMPLETED", {"pct": 90}),
    ]
    logs = "SELECT job_id, status FROM job_log ORDER BY job_id"
    assert rows(conn, logs) == [("child", "COMPLETED"), ("parent", "COMPLETED")]
    assert "writer_process_exited" not in b.processor.stats()  # the parent's writer lived on
