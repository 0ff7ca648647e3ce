"""The writer process seen from the job's: its start, its pipe ends, its counters."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from ..settings import Settings
from .wire import write_frame

__all__ = ["ChildCounters", "WriterChild"]

# What describes the current writer process; every other counter adds up across them.
_GAUGES = frozenset({"queued", "open_attempts", "open_spans", "backlogged"})


def _adds_up(name: str, value: object) -> bool:
    """A counter that carries over from a dead writer process to the next one's."""
    return name not in _GAUGES and isinstance(value, int)


# The job's working directory leaves the path first (no module there shadows ours; `-P` is
# 3.11+), then the writer process runs.
_START = (
    "import sys; del sys.path[0]; from otel_jobsteps._live.writer_process.main import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def _child_environment() -> dict[str, str]:
    """The job's environment, this copy of the package first on the path, and no
    auto-instrumentation or SDK that would make the writer process trace itself."""
    environment = dict(os.environ, OTEL_SDK_DISABLED="true")
    ours = str(Path(__file__).resolve().parents[3])
    path = [
        entry
        for entry in environment.get("PYTHONPATH", "").split(os.pathsep)
        if entry and "auto_instrumentation" not in entry
    ]
    environment["PYTHONPATH"] = os.pathsep.join([ours, *path])
    return environment


class WriterChild:
    """One writer process and the two pipe ends the relay keeps; every descriptor is in
    ``fds`` from the moment it exists, so a fork at any point closes it in the forked child."""

    def __init__(self, settings: Settings, fds: set[int]) -> None:
        self.exited = False
        self.replies_read = threading.Event()  # its last counters are in the relay's
        self._fds = fds
        to_child, self.to_fd = self._pipe()
        self.from_fd, from_child = self._pipe()
        try:
            command = [sys.executable, "-c", _START, str(to_child), str(from_child)]
            self.process = subprocess.Popen(
                command,
                pass_fds=(to_child, from_child),
                stdin=subprocess.DEVNULL,
                env=_child_environment(),
            )
        except BaseException:
            for fd in (to_child, from_child, self.to_fd, self.from_fd):
                self._close(fd)
            raise
        self._close(to_child)
        self._close(from_child)
        try:
            # The settings travel through the pipe: a password must not show in ps.
            write_frame(self.to_fd, [json.dumps(settings.payload())])
        except BaseException:
            self.close_pipe()
            self.close_replies()
            self.process.kill()
            self.process.wait()
            raise

    def _pipe(self) -> tuple[int, int]:
        read, write = os.pipe()
        self._fds.update((read, write))
        return read, write

    def _close(self, fd: int) -> int:
        """Close ``fd`` once (a number closed twice may belong to someone else by then)."""
        if fd >= 0:
            self._fds.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        return -1

    def close_pipe(self) -> None:
        """Closing the writer's input ends it: it writes what it holds and exits."""
        self.to_fd = self._close(self.to_fd)

    def close_replies(self) -> None:
        self.from_fd = self._close(self.from_fd)


class ChildCounters:
    """The writer processes' counters: the running one's latest, plus those of the dead ones."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] = {}
        self._dead: Counter[str] = Counter()
        self._lock = threading.Lock()  # a dead process's counters move over as one step

    def retire(self) -> None:
        """The running one died: what adds up carries over to the next one's."""
        with self._lock:
            self._dead.update(
                {name: value for name, value in self.latest.items() if _adds_up(name, value)}
            )
            self.latest = {}

    def merged(self) -> dict[str, Any]:
        """All of them (never going back when one is replaced)."""
        with self._lock:
            latest = self.latest
            merged: dict[str, Any] = dict(self._dead)
        for name, value in latest.items():
            if not _adds_up(name, value):
                merged[name] = value
            else:
                merged[name] = merged.get(name, 0) + value
        return merged
