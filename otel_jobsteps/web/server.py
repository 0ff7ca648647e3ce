"""Running ``serve``: check the listen address and the exposure, then uvicorn until interrupted."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .._http.health import SERVE_RIGHTS, Readiness
from .._http.listen import check_free, parse_listen, url_host
from .._http.loopback import is_loopback, loopback_hosts
from .._pg.db import redact
from .actions import Operator
from .metrics import DEFAULT_SILENT_AFTER
from .overdue import DEFAULT_OVERDUE_FACTOR
from .routing import create_app
from .security import check_exposure

__all__ = ["DEFAULT_LISTEN", "UVICORN_OPTIONS", "serve", "uvicorn_options"]

DEFAULT_LISTEN = "127.0.0.1:8080"
# How uvicorn runs the app. No X-Forwarded-* header is believed (uvicorn's default believes
# them from 127.0.0.1): the client whose wrong tokens are slowed is the connection's peer.
UVICORN_OPTIONS: dict[str, Any] = {
    "log_level": "warning",
    "server_header": False,
    "proxy_headers": False,
}


def uvicorn_options(forwarded_allow_ips: str | None) -> dict[str, Any]:
    """`UVICORN_OPTIONS`, believing X-Forwarded-For and -Proto only from the proxies named (a
    comma list of addresses or networks): behind them, the client slowed for wrong tokens is
    the one the proxy names, and the token cookie is Secure when the proxy speaks HTTPS."""
    if not forwarded_allow_ips:
        return dict(UVICORN_OPTIONS)
    return {**UVICORN_OPTIONS, "proxy_headers": True, "forwarded_allow_ips": forwarded_allow_ips}


def serve(
    dsn: str,
    *,
    listen: str = DEFAULT_LISTEN,
    schema: str = "public",
    trace_url: str | None = None,
    token: str | None = None,
    no_auth: bool = False,
    access_log: bool = False,
    announce: Callable[[str], None] | None = None,
    silent_after: timedelta = DEFAULT_SILENT_AFTER,
    metrics_max_series: int | None = None,
    forwarded_allow_ips: str | None = None,
    operator: Operator | None = None,
    overdue_factor: float = DEFAULT_OVERDUE_FACTOR,
) -> None:
    """Run the web page until interrupted (uvicorn). Checks the listen address first."""
    import uvicorn

    host, port = parse_listen(listen, example=DEFAULT_LISTEN)
    check_exposure(host, token, no_auth)
    check_free(host, port)
    # Without a token, a loopback server answers loopback names only (DNS rebinding).
    hosts = loopback_hosts(host) if is_loopback(host) and not token else None
    app = create_app(
        dsn,
        schema=schema,
        trace_url=trace_url,
        token=token,
        hosts=hosts,
        silent_after=silent_after,
        access_log=access_log,
        metrics_max_series=metrics_max_series,
        operator=operator,
        overdue_factor=overdue_factor,
    )
    if announce is not None:
        announce(_serving_line(dsn, schema, host, port))
    uvicorn.run(app, host=host, port=port, **uvicorn_options(forwarded_allow_ips))


def _serving_line(dsn: str, schema: str, host: str, port: int) -> str:
    """The line printed at start: the URL, the database (no password), schema and layout."""
    layout = Readiness(dsn, schema=schema, rights=SERVE_RIGHTS).layout()
    return (
        f"serving http://{url_host(host)}:{port}/ (database {redact(dsn)}, schema {schema!r},"
        f" layout {layout})"
    )
