"""A small TCP proxy in front of PostgreSQL that can fail on command (loopback only).

The proxy listens on 127.0.0.1 and forwards each accepted connection to the real server, over
TCP or its Unix socket. A test switches its `Mode` at any time:

- ``PASS``: forward both ways.
- ``REFUSE``: reset every new connection as soon as it arrives (each one is counted).
- ``BLACKHOLE``: accept new connections and forward nothing, on new and existing connections
  alike; bytes wait in the kernel buffers and flow again when the mode goes back to ``PASS``
  (the server side of a new connection is opened at once and hears nothing meanwhile).
- ``SLOW``: forward both ways, each chunk from the server ``slow_delay_s`` late.

`FaultProxy.cut` closes every current connection at once; `FaultProxy.cut_when` arms a cut
for the moment the server sends given bytes (that chunk never reaches the client), which drops
a connection at an exact point of a batch. `FaultProxy.blackhole_when` switches to
``BLACKHOLE`` at an exact point too: right after the client's chunk holding given bytes went
through (the server got the request, its reply is held), or when the server sends given bytes
(that chunk is held, and delivered first once the mode is back to ``PASS``).

Bounded: at most ``max_connections`` at a time (more are reset), every send times out, and the
threads (one acceptor, one pump per connection) poll a stop event, so `FaultProxy.close` always
returns, having closed every socket.
"""

from __future__ import annotations

import enum
import selectors
import socket
import struct
import threading
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["FaultProxy", "Mode", "Upstream"]

_CHUNK = 65536
_JOIN_TIMEOUT_S = 5.0


class Mode(enum.Enum):
    """How the proxy treats traffic right now."""

    PASS = "pass"
    REFUSE = "refuse"
    BLACKHOLE = "blackhole"
    SLOW = "slow"


@dataclass(frozen=True)
class Upstream:
    """Where the real server listens: a Unix socket path, or a TCP host and port."""

    unix_path: str | None = None
    host: str | None = None
    port: int = 5432

    @classmethod
    def from_dsn(cls, dsn: str) -> Upstream:
        """The server a libpq connection string points at (its first host)."""
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "/var/run/postgresql").split(",")[0]
        port = int(str(params.get("port") or "5432").split(",")[0])
        if host.startswith("/"):
            return cls(unix_path=f"{host}/.s.PGSQL.{port}")
        return cls(host=str(params.get("hostaddr") or host), port=port)

    def connect(self, timeout_s: float) -> socket.socket:
        if self.unix_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout_s)
                sock.connect(self.unix_path)
            except OSError:
                sock.close()
                raise
            return sock
        assert self.host is not None
        return socket.create_connection((self.host, self.port), timeout=timeout_s)


class _Link:
    """One proxied connection: the client's socket, the server's socket, and their pump."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.lock = threading.Lock()
        self.hung_up = threading.Event()
        self.closed = False
        self.thread: threading.Thread | None = None
        self.held = b""  # from the server, kept back by `FaultProxy.blackhole_when`

    def hang_up(self) -> None:
        """Shut both sockets down (wakes a pump blocked on them); the pump closes them."""
        self.hung_up.set()
        with self.lock:
            if self.closed:
                return
            for sock in (self.client, self.server):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for sock in (self.client, self.server):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


class FaultProxy:
    """A controllable loopback proxy to one PostgreSQL server; use it as a context manager."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        slow_delay_s: float = 0.2,
        poll_s: float = 0.02,
        send_timeout_s: float = 2.0,
        max_connections: int = 32,
    ) -> None:
        self._upstream = upstream
        self._max_connections = max_connections
        self._slow_delay_s = slow_delay_s
        self._poll_s = poll_s
        self._send_timeout_s = send_timeout_s
        self._mode = Mode.PASS
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._links: list[_Link] = []
        self._cut_marker: bytes | None = None
        self._cuts_left = 0
        self._blackhole_markers: tuple[bytes | None, bytes | None] = (None, None)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(poll_s)
        self.port: int = self._listener.getsockname()[1]
        self._accepted = 0
        self.cuts = 0
        self.delayed_chunks = 0
        self.client_bytes = 0
        self.server_bytes = 0
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="fault-proxy-accept", daemon=True
        )
        self._acceptor.start()

    # -- control ------------------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        self._mode = mode

    @property
    def accepted(self) -> int:
        """Connections that reached the proxy so far (refused ones included)."""
        with self._lock:
            return self._accepted

    def live_connections(self) -> int:
        with self._lock:
            return sum(1 for link in self._links if not link.closed)

    def cut(self) -> int:
        """Close every current connection now; returns how many there were."""
        with self._lock:
            links = [link for link in self._links if not link.closed]
            self.cuts += len(links)
        for link in links:
            link.hang_up()
        return len(links)

    def cut_when(self, *, server_sends: bytes, times: int = 1) -> None:
        """Cut a connection the next ``times`` times the server sends ``server_sends``.

        The chunk holding the marker is not forwarded: the server did the work, the client
        never hears about it. The marker is looked for within one chunk (PostgreSQL's short
        replies, such as a CommandComplete tag, arrive whole on loopback).
        """
        with self._lock:
            self._cut_marker = server_sends
            self._cuts_left = times

    def blackhole_when(
        self, *, client_sends: bytes | None = None, server_sends: bytes | None = None
    ) -> None:
        """Switch to ``BLACKHOLE`` once, after the client's chunk holding ``client_sends`` was
        forwarded, or holding back the server's chunk with ``server_sends`` (sent on PASS)."""
        with self._lock:
            self._blackhole_markers = (client_sends, server_sends)

    def cuts_pending(self) -> int:
        with self._lock:
            return self._cuts_left

    def dsn_for(self, dsn: str, **overrides: str) -> str:
        """``dsn`` pointed at this proxy (plain TCP: no SSL or GSS negotiation to count twice)."""
        return make_conninfo(
            dsn,
            host="127.0.0.1",
            hostaddr=None,
            port=str(self.port),
            sslmode="disable",
            gssencmode="disable",
            **overrides,
        )

    def close(self) -> None:
        """Stop accepting, hang up every connection, join every thread, close every socket."""
        self._stop.set()
        self._acceptor.join(_JOIN_TIMEOUT_S)
        with self._lock:
            links = list(self._links)
        for link in links:
            link.hang_up()
        for link in links:
            if link.thread is not None:
                link.thread.join(_JOIN_TIMEOUT_S)
            link.close()
        self._listener.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- threads ------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._accepted += 1
                self._links = [known for known in self._links if not known.closed]
                full = len(self._links) >= self._max_connections
            if self._mode is Mode.REFUSE or full:
                # SO_LINGER 0: close with a reset, the way a refusing server looks to libpq.
                with suppress(OSError):
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                server = self._upstream.connect(self._send_timeout_s)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.settimeout(self._send_timeout_s)
            link = _Link(client, server)
            link.thread = threading.Thread(
                target=self._pump, args=(link,), name="fault-proxy-pump", daemon=True
            )
            with self._lock:
                self._links.append(link)
            link.thread.start()

    def _pump(self, link: _Link) -> None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(link.client, selectors.EVENT_READ, (link.client, link.server))
                selector.register(link.server, selectors.EVENT_READ, (link.server, link.client))
                while not self._stop.is_set() and not link.hung_up.is_set():
                    if self._mode is Mode.BLACKHOLE:
                        link.hung_up.wait(self._poll_s)  # read nothing: the peer waits on
                        continue
                    if link.held:
                        held, link.held = link.held, b""
                        link.client.sendall(held)
                    for key, _ in selector.select(self._poll_s):
                        source, target = key.data
                        if not self._forward(link, source, target):
                            return
        except OSError:
            return
        finally:
            link.close()

    def _forward(self, link: _Link, source: socket.socket, target: socket.socket) -> bool:
        data = source.recv(_CHUNK)
        if not data:
            return False
        from_server = source is link.server
        if from_server and self._should_cut(data):
            return False
        if self._blackhole_after(data, from_server=from_server, before=True):
            link.held = data
            return True
        if from_server and self._mode is Mode.SLOW:
            with self._lock:
                self.delayed_chunks += 1
            if self._stop.wait(self._slow_delay_s):
                return False
        target.sendall(data)
        with self._lock:
            if from_server:
                self.server_bytes += len(data)
            else:
                self.client_bytes += len(data)
        self._blackhole_after(data, from_server=from_server, before=False)
        return True

    def _blackhole_after(self, data: bytes, *, from_server: bool, before: bool) -> bool:
        """Switch to BLACKHOLE if ``data`` holds the armed marker of its direction: server
        chunks are checked before they are forwarded, client chunks after."""
        if before is not from_server:
            return False
        with self._lock:
            marker = self._blackhole_markers[from_server]
            if marker is None or marker not in data:
                return False
            self._blackhole_markers = (None, None)
            self._mode = Mode.BLACKHOLE
            return True

    def _should_cut(self, data: bytes) -> bool:
        with self._lock:
            if self._cuts_left <= 0 or self._cut_marker is None or self._cut_marker not in data:
                return False
            self._cuts_left -= 1
            self.cuts += 1
            return True
