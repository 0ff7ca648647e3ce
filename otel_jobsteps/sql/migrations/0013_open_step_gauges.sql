-- The open steps with what serve's /metrics gauges read (open and silent steps by domain, job
-- type and step) and /running orders by (the last sign of life, then id), so a scrape is an
-- Index Only Scan, and /running reads the heap of the rows it shows only, whatever the table's
-- size and wherever the open rows lie in the heap. heartbeat_at is in it, so a change of
-- heartbeat_at is no longer a HOT update: the writers move it once per heartbeat interval
-- (refresh_heartbeats), and a progress write moves it only once the step's last sign of life
-- is 15 s old, so most progress writes stay HOT (write_progress).
-- Its predicate is the open-step condition wrapped in IS TRUE (the same rows), so only a
-- statement that says it so can use the index: the writer's guarded statements, which say
-- type = 'STEP' AND ended_at IS NULL, keep probing job_event_one_open_step even on a generic
-- plan over an empty table's statistics, where the planner took this index for them and
-- walked it (tests/integration/test_open_step_plans.py).
-- An index of that name with another predicate is the opt-in one earlier docs suggested: it is
-- replaced. One built beforehand as here (CREATE INDEX CONCURRENTLY, docs/operations.md) is kept,
-- so a big table need not hold its writers for the build.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_indexes
               WHERE schemaname = current_schema() AND indexname = 'job_event_open_gauges'
                 AND indexdef NOT LIKE '%IS TRUE%') THEN
        DROP INDEX job_event_open_gauges;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS job_event_open_gauges
    ON job_event (domain, job_type, step_key) INCLUDE (created_at, heartbeat_at, id)
    WHERE (type = 'STEP' AND ended_at IS NULL) IS TRUE;

-- What share of job_event is open steps, for the planner: the predicate above is an expression
-- it would otherwise estimate from type and ended_at as if independent (every event row has no
-- ended_at), some hundred thousand rows for 20,000 open steps on 5 M rows. It then chose a
-- parallel Bitmap Heap Scan with JIT over this Index Only Scan whenever the visibility map was
-- not fresh (192 ms against 33 ms in benchmarks/web.py's state after its inserts).
CREATE STATISTICS IF NOT EXISTS job_event_open_steps
    ON ((type = 'STEP' AND ended_at IS NULL)) FROM job_event;
