-- serve's /metrics gauges (issue 24): open steps by domain, job type and step. Runs with
-- search_path set to the target schema. IF NOT EXISTS: on a big table an operator may build the
-- index CONCURRENTLY beforehand.

-- The open steps by the gauges' labels and start, from the index alone (Index Only Scan): the
-- open counts, and which steps started before a cutoff (only those can be silent, and only
-- those get a heap visit for their heartbeat). Only columns no progress write or heartbeat
-- changes, so those updates stay HOT; a close leaves the predicate (as for
-- job_event_one_open_step), and the writer's other rows only test it.
CREATE INDEX IF NOT EXISTS job_event_open_step_key
    ON job_event (domain, job_type, step_key, created_at) INCLUDE (id)
    WHERE type = 'STEP' AND ended_at IS NULL;
