"""Attempts of one job in different traces meet in time order within a request, as the
processor sees them: a zombie attempt 1 that ends after attempt 2 began is abandoned."""

from __future__ import annotations

from otel_jobsteps.ingest.decode import decode_protobuf
from otel_jobsteps.ingest.settings import CollectSettings
from otel_jobsteps.ingest.staging import Staging
from tests.ingest.collector import table_rows
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording, overlapping_attempts


def test_overlapping_attempts_in_one_request_give_the_processors_rows(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    spans = recording.spans(overlapping_attempts, "-overlap")
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    staging = Staging(CollectSettings(second_dsn, connections=1))
    try:
        staging.receive(decoded.spans, decoded.wire)
    finally:
        staging.close()
    steps, logs = table_rows(dsn, "%-overlap")
    assert [row[3:6] for row in logs] == [(1, "FAILED", "abandoned"), (2, "COMPLETED", None)]
    assert table_rows(second_dsn, "%-overlap") == (steps, logs)
