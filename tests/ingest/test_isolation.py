"""One bad job or one failed statement never takes its neighbours or other clients down: a
statement PostgreSQL refuses for one job refuses that job's spans alone (``partial_success``,
counted), a lock held on one job answers that job's requests retryable while every other
request is taken, and collect pauses only for a database that is away."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from opentelemetry.trace import Tracer
from psycopg.conninfo import make_conninfo

from tests.ingest.collector import table_rows
from tests.ingest.receiver import one_job, receiving
from tests.ingest.requests import partial_success
from tests.ingest.stories import Recording

# A statement of collect's own that fails for one job whatever it holds (the rows it derives
# are written as the processor's are: a row PostgreSQL refuses is dropped alone, counted).
POISON = """
CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.job_id LIKE 'poison%' THEN RAISE EXCEPTION 'a poisoned job'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON otlp_job
    FOR EACH ROW EXECUTE FUNCTION poison();
"""


def _jobs(*job_ids: str, attempt: int = 1) -> Callable[[Tracer, str], None]:
    def story(tracer: Tracer, _: str) -> None:
        for job_id in job_ids:
            with tracer.start_as_current_span(
                "job", attributes={"job.domain": "d", "job.id": job_id, "job.attempt": attempt}
            ):
                with tracer.start_as_current_span("step", attributes={"job.step.key": "S"}):
                    pass

    return story


def test_a_statement_failing_for_one_job_refuses_that_job_alone(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        conn.execute(POISON)

    def story(tracer: Tracer, _: str) -> None:
        for job_id in ("innocent-1", "poison-1", "innocent-2"):
            one_job(tracer, domain="d", job_id=job_id)

    spans = recording.spans(story, "")
    with receiving(second_dsn) as receiver:
        reply = receiver.post(spans)
        again = receiver.post(spans)  # the exporter does not retry a 200: a client may
        refusals, pauses = receiver.count("statement_refusals"), receiver.count("database_pauses")

    assert (reply.status_code, again.status_code) == (200, 200)
    rejected, message = partial_success(reply)
    assert rejected >= 1
    assert "refused" in message
    assert "P0001" in message
    assert partial_success(again)[0] >= 1
    assert refusals >= 2
    assert pauses == 0
    assert table_rows(second_dsn, "poison-%") == ([], [])
    assert table_rows(second_dsn, "innocent-%") == table_rows(dsn, "innocent-%")
    assert len(table_rows(second_dsn, "innocent-%")[1]) == 2


def test_a_locked_job_answers_its_own_requests_retryable_and_no_one_else_waits(
    recording: Recording, second_dsn: str
) -> None:
    collect_dsn = make_conninfo(second_dsn, options="-c lock_timeout=200")
    first = recording.spans(_jobs("locked"), "")
    later = recording.spans(_jobs("locked", attempt=2), "")
    others = [recording.spans(_jobs(f"other-{n}"), "") for n in range(5)]
    with receiving(collect_dsn) as receiver, psycopg.connect(second_dsn) as holder:
        assert receiver.post(first).status_code == 200
        holder.execute("SELECT FROM otlp_job WHERE job_id = 'locked' FOR UPDATE")
        locked = receiver.post(later)
        answers = [receiver.post(spans).status_code for spans in others]
        resting, ready = receiver.staging.resting(), receiver.client.get("/readyz").status_code
        retried = receiver.post(later)
        retry_answers = receiver.count("statement_retry_answers")
        refused = receiver.post(later)  # a third time: its spans are refused, the rest taken
        pauses = receiver.count("database_pauses")
        refusals = receiver.count("statement_refusals")
        holder.rollback()

    assert locked.status_code == retried.status_code == 503
    assert locked.headers["Retry-After"] == "2"
    assert answers == [200] * 5
    assert (resting, ready) == (False, 200)
    assert retry_answers == 2
    assert refused.status_code == 200
    assert partial_success(refused)[0] >= 1
    assert pauses == 0
    assert refusals >= 1
    for n in range(5):
        assert len(table_rows(second_dsn, f"other-{n}")[1]) == 1
