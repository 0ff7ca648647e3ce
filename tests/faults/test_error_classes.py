"""How a failed write is classified (by SQLSTATE, one table in code and docs), how errors are
shown (every line of the cause, one printable line), and the TCP bounds every connection gets."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from otel_jobsteps._pg.db import borrowed_connection
from otel_jobsteps._pg.store import SQLSTATE_CLASSES, StepStore, rejects_row
from otel_jobsteps.errors import DatabaseUnavailableError, describe
from tests.helpers import free_port

FAILURES = Path(__file__).resolve().parents[2] / "docs" / "failures.md"
TABLE_ROW = re.compile(r"^\s*\| `(\w\w)` \| (row|retry) \| (.+) \|$", re.MULTILINE)


def test_the_docs_show_the_same_sqlstate_table_as_the_code() -> None:
    rows = TABLE_ROW.findall(FAILURES.read_text())
    shown = {code: (action, meaning) for code, action, meaning in rows}
    assert shown == SQLSTATE_CLASSES


@pytest.mark.parametrize(
    ("sqlstate", "row_error"),
    [
        pytest.param("57014", False, id="statement-timeout"),
        pytest.param("55P03", False, id="lock-not-available"),
        pytest.param("40001", False, id="serialization-failure"),
        pytest.param("40P01", False, id="deadlock"),
        pytest.param("53100", False, id="disk-full"),
        pytest.param("53300", False, id="too-many-connections"),
        pytest.param("57P01", False, id="admin-shutdown"),
        pytest.param("57P03", False, id="cannot-connect-now"),
        pytest.param("25006", False, id="read-only"),
        pytest.param("08006", False, id="connection-failure"),
        pytest.param("42P01", False, id="undefined-table"),
        pytest.param("42501", False, id="insufficient-privilege"),
        pytest.param("XX000", False, id="internal-error"),
        pytest.param("22P02", True, id="invalid-text"),
        pytest.param("22003", True, id="out-of-range"),
        pytest.param("23514", True, id="check-violation"),
        pytest.param("23505", True, id="unique-violation"),
        pytest.param("21000", True, id="cardinality"),
        pytest.param("54000", True, id="row-too-large-for-index"),
        pytest.param("P0001", True, id="trigger-raise"),
    ],
)
def test_only_errors_about_the_row_itself_take_the_one_at_a_time_path(
    sqlstate: str, row_error: bool
) -> None:
    error = psycopg.errors.lookup(sqlstate)("from the server")
    assert error.sqlstate == sqlstate
    assert rejects_row(error) is row_error


@pytest.mark.parametrize(
    ("error", "row_error"),
    [
        pytest.param(psycopg.OperationalError("server closed the connection"), False, id="lost"),
        pytest.param(psycopg.InterfaceError("the connection is closed"), False, id="closed"),
        pytest.param(psycopg.DataError("cannot dump this value"), True, id="client-data"),
        pytest.param(TypeError("a bug of ours building parameters"), False, id="our-bug"),
        pytest.param(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate"), True, id="utf8"),
        pytest.param(RuntimeError("a bug of ours"), False, id="not-postgres"),
    ],
)
def test_errors_without_a_sqlstate(error: BaseException, row_error: bool) -> None:
    assert rejects_row(error) is row_error


def test_a_connection_error_keeps_its_cause_on_one_line() -> None:
    error = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused'
        "\n\tIs the server running on that host and accepting TCP/IP connections?"
    )
    assert describe(error) == (
        'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused'
        " / Is the server running on that host and accepting TCP/IP connections?"
    )


def test_a_server_detail_quoting_job_strings_is_one_printable_bounded_line() -> None:
    error = psycopg.errors.UniqueViolation(
        "duplicate key\nDETAIL:  Key (x)=(a\nFAKE LOG LINE\x1b[31m) already exists." + "y" * 5000
    )
    text = describe(error)
    assert text.isprintable()
    assert "\n" not in text
    assert "FAKE LOG LINE\\x1b[31m" in text
    assert len(text) <= 1000


def test_a_refused_connection_says_connection_refused_without_the_password() -> None:
    dsn = f"postgresql://u:hunter2@127.0.0.1:{free_port()}/db?sslmode=disable"
    with pytest.raises(DatabaseUnavailableError) as raised, borrowed_connection(dsn):
        pass
    message = str(raised.value)
    assert "Connection refused" in message
    assert "Is the server running" in message
    assert "\n" not in message
    assert "hunter2" not in message


def test_the_writer_connection_is_bounded_by_tcp_too(dsn: str) -> None:
    """libpq accepts the bounds: tcp_user_timeout is the reply timeout, keepalives are on."""
    store = StepStore(dsn, statement_timeout_ms=300, connect_timeout_s=2)
    try:
        params = store.connection().info.get_parameters()
    finally:
        store.close()
    assert store.reply_timeout_s == 2.3
    assert (params["tcp_user_timeout"], params["keepalives"]) == ("2300", "1")
