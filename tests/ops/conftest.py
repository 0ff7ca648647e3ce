"""The ingest tests' fixtures (a second migrated database, collect processes), used here too."""

from tests.ingest.conftest import second_dsn, start_collect

__all__ = ["second_dsn", "start_collect"]
