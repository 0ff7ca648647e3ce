"""`redact`: no secret libpq parameter of a DSN reaches a message, in either DSN form; DSNs and
schema names that cannot be used are configuration errors."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from otel_jobsteps._pg.db import check_dsn, check_schema_name, redact
from otel_jobsteps.errors import ConfigurationError

SECRET = "s3cret-never-shown"


def _known(parameter: str) -> bool:
    return any(o.keyword.decode() == parameter for o in psycopg.pq.Conninfo.get_defaults())


@pytest.mark.parametrize(
    "dsn",
    [
        pytest.param(f"postgresql://app:{SECRET}@db.example/jobs", id="url-password"),
        pytest.param(f"postgresql://app@db.example/jobs?password={SECRET}", id="url-query"),
        pytest.param(f"postgresql://app@db.example/jobs?sslpassword={SECRET}", id="url-ssl"),
        pytest.param(f"host=db.example user=app password={SECRET}", id="kv-password"),
        pytest.param(f"host=db.example user=app sslpassword='{SECRET}'", id="kv-ssl"),
        pytest.param(f"host=db.example password={SECRET} sslpassword={SECRET}x", id="kv-both"),
        *(
            pytest.param(f"host=db.example {name}={SECRET}", id=f"kv-{name}")
            for name in ("oauth_client_secret", "scram_client_key", "scram_server_key")
            if _known(name)  # libpq 18 parameters: older ones refuse to parse them
        ),
    ],
)
def test_every_secret_is_masked(dsn: str) -> None:
    shown = redact(dsn)

    assert SECRET not in shown
    assert "***" in shown
    assert conninfo_to_dict(shown)["host"] == "db.example"


def test_other_parameters_are_kept() -> None:
    shown = redact("postgresql://app@db.example:5433/jobs?sslmode=require&application_name=x")

    assert conninfo_to_dict(shown) == {
        "user": "app",
        "host": "db.example",
        "port": "5433",
        "dbname": "jobs",
        "sslmode": "require",
        "application_name": "x",
    }


@pytest.mark.parametrize("dsn", [f"password={SECRET} nonsense", f"password={SECRET}\udcff"])
def test_an_unparsable_dsn_is_not_echoed(dsn: str) -> None:
    assert redact(dsn) == "<unparsable connection string>"


@pytest.mark.parametrize("dsn", ["host=h dbname=\udcff", "postgresql://u@h/\udcff"])
def test_an_undecodable_dsn_is_a_configuration_error(dsn: str) -> None:
    # What Python makes of an argument's invalid UTF-8 bytes (lone surrogates), from a library
    # caller too, not only the CLI: a clear error that does not echo the DSN.
    with pytest.raises(ConfigurationError) as raised:
        check_dsn(dsn)
    assert "\udcff" not in str(raised.value)


@pytest.mark.parametrize("schema", ["\udcff", "", "a\x00b", "x" * 64])
def test_a_schema_that_cannot_be_a_name_is_a_configuration_error(schema: str) -> None:
    with pytest.raises(ConfigurationError, match="schema must be"):
        check_schema_name(schema)
