"""`/healthz` and `/readyz` of serve and collect: no token needed, nothing about jobs, 503 with
the reason (never the password) while the database is away, read-only for collect, or a right on
any table is missing, 200 again after; an answer is reused for a second."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from otel_jobsteps._http.health import COLLECT_RIGHTS, Readiness
from otel_jobsteps._http.loopback import loopback_hosts
from otel_jobsteps._ingest.app import create_app as create_collect
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps.web import create_app as create_serve
from tests.faults.proxy import FaultProxy, Mode, Upstream
from tests.unit.recorder_support import FakeClock

SECRET = "pa55-for-nobody"
TOKEN = "the-page-token-long-enough"
AppFactory = Callable[[str], ASGIApp]


def _serve(dsn: str) -> ASGIApp:
    return create_serve(dsn, token=TOKEN)


def _collect(dsn: str) -> ASGIApp:
    return create_collect(Staging(CollectSettings(dsn, connections=1, connect_timeout_s=2)))


SERVICES = [pytest.param(_serve, id="serve"), pytest.param(_collect, id="collect")]


@pytest.fixture(autouse=True)
def uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each probe of these tests asks the database (the cache has its own test)."""
    monkeypatch.setattr(Readiness, "cache_s", 0.0)


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
        tables = sql.SQL(", ").join(map(sql.Identifier, COLLECT_RIGHTS.tables))
        grant = "GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}"
        conn.execute(sql.SQL(grant).format(tables, sql.Identifier(name)))
        conn.execute(
            sql.SQL(
                "GRANT SELECT ON job_attempt, job_step_duration, job_failed_step,"
                " job_retried_success TO {}"
            ).format(sql.Identifier(name))
        )
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _change(dsn: str, verb: str, right: str, table: str, role: str) -> None:
    statement = {"grant": "GRANT {} ON {} TO {}", "revoke": "REVOKE {} ON {} FROM {}"}[verb]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(statement).format(sql.SQL(right), sql.Identifier(table), sql.Identifier(role))
        )


@pytest.mark.parametrize(
    ("factory", "right", "table"),
    [
        pytest.param(_serve, "SELECT", "job_log", id="serve-job_log"),
        pytest.param(_serve, "SELECT", "job_attempt", id="serve-job_attempt"),
        pytest.param(_serve, "SELECT", "job_failed_step", id="serve-job_failed_step"),
        pytest.param(_serve, "SELECT", "job_retried_success", id="serve-job_retried_success"),
        pytest.param(_collect, "DELETE", "job_log", id="collect-job_log"),
        pytest.param(_collect, "INSERT", "otlp_log", id="collect-otlp_log"),
        pytest.param(_collect, "UPDATE", "otlp_job", id="collect-otlp_job"),
        pytest.param(_collect, "SELECT", "otlp_attempt", id="collect-otlp_attempt"),
    ],
)
def test_readyz_names_a_revoked_right_and_recovers_when_granted(
    factory: AppFactory, right: str, table: str, role: str, dsn: str
) -> None:
    def change(verb: str) -> None:
        _change(dsn, verb, right, table, role)

    with TestClient(factory(make_conninfo(dsn, user=role))) as client:
        before = client.get("/readyz")
        change("revoke")
        revoked = client.get("/readyz")
        change("grant")
        granted = client.get("/readyz")

    assert before.status_code == 200
    said = f"this role lacks {right} on {table}"
    assert (revoked.status_code, revoked.json()) == (503, {"ready": False, "reason": said})
    assert granted.status_code == 200


@pytest.fixture
def read_only(dsn: str) -> Callable[[bool], None]:
    """Turns the test database's default_transaction_read_only on or off for new sessions (as
    a failover to a standby, or an operator, makes it)."""
    name = sql.Identifier(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])

    def turn(on: bool) -> None:
        setting = (
            "SET default_transaction_read_only = on"
            if on
            else "RESET default_transaction_read_only"
        )
        writable = "-c default_transaction_read_only=off"  # this session, to turn it back off
        with psycopg.connect(dsn, autocommit=True, options=writable) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} " + setting).format(name))

    return turn


def test_readyz_of_collect_is_503_on_a_read_only_database_and_200_after(
    dsn: str, read_only: Callable[[bool], None]
) -> None:
    with TestClient(_collect(dsn)) as client:
        read_only(True)
        unready = client.get("/readyz")
        read_only(False)
        back = client.get("/readyz")

    assert unready.status_code == 503
    assert unready.json()["reason"] == (
        "the database is read-only (default_transaction_read_only is on): collect cannot write"
    )
    assert (back.status_code, back.json()) == (200, {"ready": True})


def test_readyz_of_serve_is_200_on_a_read_only_database(
    dsn: str, read_only: Callable[[bool], None]
) -> None:
    read_only(True)
    with TestClient(_serve(dsn)) as client:
        answer = client.get("/readyz")

    assert (answer.status_code, answer.json()) == (200, {"ready": True})  # serve only reads


def test_an_answer_is_reused_for_a_second_then_checked_again(role: str, dsn: str) -> None:
    clock = FakeClock()
    role_dsn = make_conninfo(dsn, user=role)
    readiness = Readiness(role_dsn, schema="public", rights=COLLECT_RIGHTS, clock=clock)
    readiness.cache_s = 1.0  # as served (the fixture above has the other tests ask every time)
    first = readiness.problem()
    _change(dsn, "revoke", "UPDATE", "otlp_job", role)
    clock.advance(0.9)
    cached = readiness.problem()
    clock.advance(0.1)
    checked = readiness.problem()

    assert (first, cached) == (None, None)
    assert checked == "this role lacks UPDATE on otlp_job"
