"""collect's rights: a role that cannot delete is refused at startup with what it lacks, and a
right revoked while it runs is answered 503 (retried by exporters), never 500."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging, StagingUnavailable
from otel_jobsteps.errors import ConfigurationError
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording, seed_story

TABLES = (
    "job_event",
    "job_log",
    "otlp_trace",
    "otlp_span",
    "otlp_job",
    "otlp_attempt",
    "otlp_log",
)


@pytest.fixture
def no_delete_role(second_dsn: str, server_dsn: str) -> Iterator[str]:
    """A role with SELECT, INSERT, UPDATE (no DELETE) on collect's tables; yields its DSN."""
    role = f"jobsteps_collect_{uuid.uuid4().hex[:8]}"
    name = sql.Identifier(role)
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(name))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {}").format(
                sql.SQL(", ").join(map(sql.Identifier, TABLES)), name
            )
        )
    yield make_conninfo(second_dsn, user=role)
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(name))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(name))


def _refusal(dsn: str) -> str:
    """What collect's startup check says to a role it refuses."""
    staging = Staging(CollectSettings(dsn, connections=1))
    try:
        with pytest.raises(ConfigurationError) as refused:
            staging.check()
    finally:
        staging.close()
    return str(refused.value)


def test_a_role_without_delete_is_refused_at_startup(no_delete_role: str) -> None:
    assert _refusal(no_delete_role).endswith(
        "lacks DELETE on job_event, DELETE on job_log, DELETE on otlp_attempt, DELETE on otlp_job,"
        " DELETE on otlp_log, DELETE on otlp_span, DELETE on otlp_trace"
    )


def test_a_role_without_select_is_told_what_it_lacks(no_delete_role: str, second_dsn: str) -> None:
    role = psycopg.conninfo.conninfo_to_dict(no_delete_role)["user"]
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE SELECT ON otlp_span FROM {}").format(sql.Identifier(role)))
    refusal = _refusal(no_delete_role)
    assert "DELETE on otlp_span, SELECT on otlp_span, DELETE on otlp_trace" in refusal


def test_a_database_error_is_unavailable_not_a_crash(
    no_delete_role: str, recording: Recording
) -> None:
    spans = recording.spans(seed_story, "-rights")
    staging = Staging(CollectSettings(no_delete_role, connections=1))
    try:
        first = decode_protobuf(request_of(spans[1:]).SerializeToString())
        staging.receive(first.spans, first.wire)  # new jobs: nothing to delete yet
        rest = decode_protobuf(request_of(spans[:1]).SerializeToString())
        with pytest.raises(StagingUnavailable, match="permission denied"):
            staging.receive(rest.spans, rest.wire)  # the earliest span: deletes earlier rows
        assert staging.stats.get("database_error") == 1
    finally:
        staging.close()
