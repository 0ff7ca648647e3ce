"""Two PostgreSQL servers of a test's own: a primary and a synchronous streaming standby, made
with this machine's server binaries (as the ``postgres`` OS user when the tests run as root:
initdb and postgres refuse root), on free loopback ports, in a temporary directory removed
after. The binaries missing: the test is skipped, or failed where
OTEL_JOBSTEPS_REQUIRE_PG_BINARIES=1 (CI)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.helpers import free_port, wait_until

__all__ = ["Server", "replicated_pair"]

REQUIRE_PG_BINARIES = os.environ.get("OTEL_JOBSTEPS_REQUIRE_PG_BINARIES") == "1"
TOOLS = ("initdb", "pg_ctl", "pg_basebackup", "postgres")
STANDBY_NAME = "standby"
TIMEOUT_S = 60


def _missing(reason: str) -> None:
    (pytest.fail if REQUIRE_PG_BINARIES else pytest.skip)(reason)


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def server_binaries() -> Path:
    """The directory of the server binaries: ``pg_config --bindir``, else Debian's newest
    /usr/lib/postgresql/*/bin."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
        )
        candidates.append(Path(found.stdout.strip()))
    versions = Path("/usr/lib/postgresql").glob("*/bin")  # 15, 16, ... (9.6 before them)
    candidates += sorted(versions, key=lambda bin_dir: _version(bin_dir.parent.name), reverse=True)
    for bin_dir in candidates:
        if all((bin_dir / tool).is_file() for tool in TOOLS):
            return bin_dir
    _missing(f"needs the PostgreSQL server binaries ({', '.join(TOOLS)}): none found")
    raise AssertionError("unreachable")


def _server_user() -> pwd.struct_passwd | None:
    """The OS user the servers run as: None (this one) unless root, then ``postgres``."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        _missing("runs as root but there is no `postgres` OS user to run the servers as")
        raise AssertionError("unreachable") from None


@dataclass
class Server:
    """One server: its data directory and port, its binaries and the user it runs as."""

    data: Path
    port: int
    bin_dir: Path
    user: pwd.struct_passwd | None

    def run(self, tool: str, *args: str) -> None:
        prefix = ["runuser", "-u", self.user.pw_name, "--"] if self.user else []
        done = subprocess.run(
            [*prefix, str(self.bin_dir / tool), *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        if done.returncode:
            log = self.data / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise AssertionError(f"{tool} {' '.join(args)}: {done.stderr}{done.stdout}\n{tail}")

    def configure(self, **settings: str | int) -> None:
        """Settings appended to postgresql.conf (a later line wins over an earlier one)."""
        lines = "".join(f"{name} = '{value}'\n" for name, value in settings.items())
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(lines)

    def start(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-w",
                 "-t", str(TIMEOUT_S), "start")  # fmt: skip

    def stop_now(self) -> None:
        """As a crash: no shutdown checkpoint, clients cut off."""
        self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "-t", str(TIMEOUT_S), "promote")

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname)


def _is_sync(primary: Server) -> bool:
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
            (STANDBY_NAME,),
        ).fetchone()
    return row is not None and row[0] == "sync"


@contextmanager
def replicated_pair() -> Iterator[tuple[Server, Server]]:
    """(primary, standby): streaming replication, synchronous (a commit returns once the
    standby has flushed it, so what a client saw committed survives the primary); stopped and
    removed after."""
    bin_dir, user = server_binaries(), _server_user()
    root = Path(tempfile.mkdtemp(prefix="otel_jobsteps_failover_"))
    servers: list[Server] = []
    try:
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
        primary = Server(root / "primary", free_port(), bin_dir, user)
        servers.append(primary)
        primary.run("initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust",
                    "--no-sync", "--no-instructions")  # fmt: skip
        common = {"listen_addresses": "127.0.0.1", "fsync": "off", "max_connections": 40}
        primary.configure(
            **common,
            port=primary.port,
            unix_socket_directories=str(primary.data),
            wal_level="replica",
            max_wal_senders=4,
            synchronous_standby_names=STANDBY_NAME,
        )
        primary.start()
        standby = Server(root / "standby", free_port(), bin_dir, user)
        servers.append(standby)
        standby.run("pg_basebackup", "-d", primary.dsn(), "-D", str(standby.data),
                    "-X", "stream", "-c", "fast", "--no-sync")  # fmt: skip
        standby.configure(
            port=standby.port,
            unix_socket_directories=str(standby.data),
            primary_conninfo=make_conninfo(primary.dsn(), application_name=STANDBY_NAME),
            synchronous_standby_names="",  # promoted, it commits alone
        )
        signal_file = standby.data / "standby.signal"
        signal_file.touch()
        if user is not None:
            os.chown(signal_file, user.pw_uid, user.pw_gid)  # removed by the server at promotion
        standby.start()
        wait_until(lambda: _is_sync(primary), what="the standby to replicate synchronously")
        yield primary, standby
    finally:
        for server in servers:
            if (server.data / "postmaster.pid").exists():
                with suppress(AssertionError, subprocess.TimeoutExpired):
                    server.stop_now()
        shutil.rmtree(root, ignore_errors=True)
