"""What a request's statements share: its cursor and store in one transaction, the queries,
the settings and the stats."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from .._core.batch import Batch
from .._pg.store import StepStore, rejects_row
from .._telemetry.metrics import Committed
from .._telemetry.stats import Stats
from ..sql import Statement
from .settings import CollectSettings

__all__ = ["Session"]


@dataclass(frozen=True, slots=True)
class Session:
    """One request's transaction and what its statements need."""

    cur: psycopg.Cursor[Any]
    store: StepStore
    queries: Mapping[str, Statement]
    settings: CollectSettings
    stats: Stats

    def execute(self, name: str, params: dict[str, Any]) -> psycopg.Cursor[Any]:
        return self.cur.execute(self.queries[name], params)

    def write(self, batch: Batch) -> Committed:
        """The batch inside the transaction (a savepoint); PostgreSQL's refusal of one row
        (hostile data) costs that row only."""
        try:
            return self.store.write(batch)
        except psycopg.Error as error:
            if not rejects_row(error):
                raise
            return self.store.write_one_by_one(
                batch, lambda name, e: self.stats.problem("rejected_row", e)
            )
