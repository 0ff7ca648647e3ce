"""Statements rendered once are the bytes psycopg would compose for the connection at each
execution: for a UTF-8 connection and for one in another encoding, with a schema name that
needs quoting and encodes differently in the two."""

from __future__ import annotations

import psycopg
import pytest

from otel_jobsteps.sql import qualified_queries, rendered_queries

SCHEMA = 'jobs "é"'


@pytest.mark.parametrize("encoding", ["UTF8", "LATIN1"])
@pytest.mark.parametrize("file_name", ["queries.sql", "ingest.sql"])
def test_rendered_statements_are_what_the_connection_would_be_sent(
    dsn: str, encoding: str, file_name: str
) -> None:
    with psycopg.connect(dsn, client_encoding=encoding) as conn:
        composed = qualified_queries(file_name, SCHEMA)
        rendered = rendered_queries(file_name, SCHEMA, conn)
        assert set(rendered) == set(composed)
        for name, query in rendered.items():
            sent = query if isinstance(query, bytes) else query.as_bytes(conn)
            assert sent == composed[name].as_bytes(conn), name
