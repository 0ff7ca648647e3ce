-- job_failed_step_refresh in PL/pgSQL on generic plans, same signature and rows (0020's body:
-- change it here from now on). The deferred triggers on job_log call it once per FAILED final
-- row at COMMIT; as a SQL function it planned both of its statements at every call: 1.7 ms per
-- failed attempt on the shared 2-core machine, against 0.1 ms on cached generic plans: one
-- attempt at a time by its key, so that a plan made on empty tables' statistics (a writer's
-- first failure) still probes the indexes.
CREATE OR REPLACE FUNCTION job_failed_step_refresh(domains text[], job_ids text[],
                                                   attempts integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    target record;
BEGIN
    -- one attempt at a time, by its key: each statement is an index probe on any statistics
    FOR target IN SELECT DISTINCT * FROM unnest(domains, job_ids, attempts) AS k (domain, job_id,
                                                                                  attempt)
    LOOP
        DELETE FROM job_failed_step AS s
        WHERE s.domain = target.domain AND s.job_id = target.job_id
          AND s.attempt = target.attempt;
        INSERT INTO job_failed_step (domain, job_id, attempt, ended_at, job_type, step_key,
                                     failed_attempts, seconds)
        SELECT f.domain, f.job_id, f.attempt, f.created_at, r.job_type, r.step_key,
               sum(r.failing), sum(r.seconds)
        FROM (
            SELECT l.domain, l.job_id, l.attempt, l.created_at, l.job_type,
                   l.detail ->> 'step' AS step
            FROM job_log AS l
            WHERE l.domain = target.domain AND l.job_id = target.job_id
              AND l.attempt = target.attempt
              AND (l.status = 'FAILED') IS TRUE  -- not job_log_ended_status's: its key only
        ) AS f
        CROSS JOIN LATERAL (
            SELECT COALESCE(f.job_type, e.job_type) AS job_type, e.step_key, 0 AS failing,
                   extract(epoch FROM job_duration(e.created_at, e.ended_at))::double precision
                       AS seconds
            FROM job_event AS e
            WHERE e.domain = f.domain AND e.job_id = f.job_id AND e.attempt = f.attempt
              AND e.type = 'STEP' AND e.ended_at IS NOT NULL AND e.step_status <> 'SKIPPED'
            UNION ALL
            SELECT f.job_type,
                   COALESCE(f.step,
                            (SELECT e.step_key FROM job_event AS e
                             WHERE e.domain = f.domain AND e.job_id = f.job_id
                               AND e.attempt = f.attempt AND e.type = 'STEP'
                               AND e.step_status <> 'SKIPPED'
                             ORDER BY e.created_at DESC, e.id DESC
                             LIMIT 1)),
                   1, 0
        ) AS r
        GROUP BY f.domain, f.job_id, f.attempt, f.created_at, r.job_type, r.step_key;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION job_failed_step_refresh(text[], text[], integer[]) IS
    'Write job_failed_step anew for these attempts from their job_log and job_event rows.';

-- Its names are unqualified and looked up when it runs: the schema it was made in, then
-- pg_temp (a session's temporary tables never stand in for them).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION job_failed_step_refresh(text[], text[], integer[])'
                   ' SET search_path = %I, pg_temp', current_schema());
END;
$$;
