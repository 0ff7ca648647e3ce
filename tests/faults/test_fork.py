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

import pytest

from otel_jobsteps import job_attempt, progress, step
from tests.faults.proxy import FaultProxy, Mode
from tests.faults.support import DOMAIN, Bridge, BridgeFactory, stat
from tests.helpers import wait_until

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
