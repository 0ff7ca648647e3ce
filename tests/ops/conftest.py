"""Fixtures of the ingest and fault tests (a second migrated database, collect processes, a
fault proxy and processors behind it), used here too."""

from tests.faults.conftest import _collect_docker_probe_socket, bridge, proxy, proxy_dsn
from tests.ingest.conftest import recording, second_dsn, start_collect

__all__ = [
    "_collect_docker_probe_socket",
    "bridge",
    "proxy",
    "proxy_dsn",
    "recording",
    "second_dsn",
    "start_collect",
]
