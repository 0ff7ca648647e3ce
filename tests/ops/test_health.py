"""`/healthz` and `/readyz` of serve and collect: no token needed, nothing about jobs, 503 with
the reason (never the password) while the database is away or a right is missing, 200 again
after."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from otel_jobsteps._ingest.app import create_app as create_collect
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps._loopback import loopback_hosts
from otel_jobsteps.web import create_app as create_serve
from tests.faults.proxy import FaultProxy, Mode, Upstream

SECRET = "pa55-for-nobody"
TOKEN = "the-page-token"
AppFactory = Callable[[str], ASGIApp]


def _serve(dsn: str) -> ASGIApp:
    return create_serve(dsn, token=TOKEN)


def _collect(dsn: str) -> ASGIApp:
    return create_collect(Staging(CollectSettings(dsn, connections=1, connect_timeout_s=2)))


SERVICES = [pytest.param(_serve, id="serve"), pytest.param(_collect, id="collect")]


@pytest.fixture
def proxy(dsn: str) -> Iterator[FaultProxy]:
    with FaultProxy(Upstream.from_dsn(dsn)) as fault_proxy:
        yield fault_proxy


@pytest.mark.parametrize("factory", SERVICES)
def test_readyz_is_503_while_the_database_is_away_and_200_after(
    factory: AppFactory, proxy: FaultProxy, dsn: str
) -> None:
    with TestClient(factory(proxy.dsn_for(dsn, password=SECRET))) as client:
        before = client.get("/readyz")
        proxy.set_mode(Mode.REFUSE)
        away = client.get("/readyz")
        alive = client.get("/healthz")
        proxy.set_mode(Mode.PASS)
        back = client.get("/readyz")

    assert (before.status_code, before.json()) == (200, {"ready": True})
    assert away.status_code == 503
    assert away.json()["reason"].startswith("database unreachable: ")
    assert SECRET not in away.text
    assert (alive.status_code, alive.text) == (200, "ok\n")  # the process lives on
    assert (back.status_code, back.json()) == (200, {"ready": True})


def test_health_needs_no_token_where_the_pages_do(dsn: str) -> None:
    with TestClient(_serve(dsn), follow_redirects=False) as client:
        page = client.get("/")
        health = client.get("/healthz")
        ready = client.get("/readyz")

    assert page.status_code == 401
    assert health.status_code == 200
    assert ready.status_code == 200
    assert "job" not in health.text + ready.text  # nothing about jobs


def test_health_keeps_the_host_check_of_a_loopback_server(dsn: str) -> None:
    app = create_serve(dsn, hosts=loopback_hosts("127.0.0.1"))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        here = client.get("/readyz")
        rebound = client.get("/readyz", headers={"host": "rebind.example"})

    assert here.status_code == 200
    assert here.headers["cache-control"] == "no-store"  # the security headers too
    assert rebound.status_code == 421


@pytest.mark.parametrize("factory", SERVICES)
def test_readyz_without_the_tables_says_run_migrate(factory: AppFactory, empty_dsn: str) -> None:
    with TestClient(factory(empty_dsn)) as client:
        answer = client.get("/readyz")

    assert answer.status_code == 503
    assert "lacks job_event, job_log" in answer.json()["reason"]
    assert "run `otel-jobsteps migrate`" in answer.json()["reason"]


@pytest.fixture
def role(dsn: str, server_dsn: str) -> Iterator[str]:
    """A login role with every right serve and collect need on the tables; yields its name."""
    name = f"jobsteps_ready_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON job_event, job_log, otlp_trace,"
                " otlp_span TO {}"
            ).format(sql.Identifier(name))
        )
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.mark.parametrize(
    ("factory", "right", "said"),
    [
        pytest.param(_serve, "SELECT", "this role lacks SELECT on job_log", id="serve"),
        pytest.param(_collect, "DELETE", "this role lacks DELETE on job_log", id="collect"),
    ],
)
def test_readyz_names_a_revoked_right_and_recovers_when_granted(
    factory: AppFactory, right: str, said: str, role: str, dsn: str
) -> None:
    def change(verb: str) -> None:
        statement = {"grant": "GRANT {} ON job_log TO {}", "revoke": "REVOKE {} ON job_log FROM {}"}
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(statement[verb]).format(sql.SQL(right), sql.Identifier(role)))

    with TestClient(factory(make_conninfo(dsn, user=role))) as client:
        before = client.get("/readyz")
        change("revoke")
        revoked = client.get("/readyz")
        change("grant")
        granted = client.get("/readyz")

    assert before.status_code == 200
    assert (revoked.status_code, revoked.json()["reason"]) == (503, said)
    assert granted.status_code == 200
