"""Writing an actions file and reading the ACTION rows an action left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from otel_jobsteps.cli import main

READ = "a-read-token-nobody-guesses"
OPERATOR = "an-operator-token-nobody-guesses"
AS_OPERATOR = {"authorization": f"Bearer {OPERATOR}"}
AS_READER = {"authorization": f"Bearer {READ}"}

_ACTION_ROWS = (
    "SELECT attempt, detail, message FROM job_event"
    " WHERE domain = %s AND job_id = %s AND type = 'ACTION' ORDER BY id"
)


def actions_file(directory: Path, domain: str, queue: str, **keys: str) -> Path:
    """A one-domain actions file; ``keys``: url or url_env and the queue's own keys."""
    lines = [f"[domains.{domain}]", f'queue = "{queue}"']
    lines += [f'{key} = "{value}"' for key, value in keys.items()]
    path = directory / f"actions-{domain}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def action_rows(dsn: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    """(attempt, detail, message) of the job's ACTION rows, oldest first."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(_ACTION_ROWS, (domain, job_id)).fetchall()


def cli(dsn: str, *argv: str) -> int:
    """``otel-jobsteps ARGV --dsn DSN`` in this process; its exit code."""
    return main([*argv, "--dsn", dsn])
