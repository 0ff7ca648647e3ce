-- Durations every reader can hold: a stored time outside what the doors write (infinity, BC, after
-- year 9999: by hand or an older version) is read at the nearest bound of otel_jobsteps/times.py,
-- 1970-01-01 .. 9999-12-30 UTC, as the loaders read it; raw subtraction failed ("cannot subtract
-- infinite timestamps") or overflowed. Runs with search_path set to the target schema.

-- How long a row ran: its clamped end minus its clamped start, never negative; NULL while open.
-- A standard body: inlined where it is called (the CASE keeps NULL for NULL, as GREATEST
-- would not), and its bounds are constants parsed here, whatever the session's time zone.
CREATE FUNCTION job_duration(started_at timestamptz, ended_at timestamptz)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN started_at IS NULL OR ended_at IS NULL THEN NULL
            ELSE LEAST(GREATEST(ended_at, started_at, timestamptz '1970-01-01 00:00:00+00'),
                       timestamptz '9999-12-30 00:00:00+00')
                 - LEAST(GREATEST(started_at, timestamptz '1970-01-01 00:00:00+00'),
                         timestamptz '9999-12-30 00:00:00+00')
       END;

COMMENT ON FUNCTION job_duration(timestamptz, timestamptz) IS
    'A row''s end minus its start, both clamped to 1970-01-01 .. 9999-12-30 UTC; never negative.';

-- Migration 0005's function (and so the job_step_duration view over it), durations now read
-- through job_duration.
CREATE OR REPLACE FUNCTION job_step_durations(closed_since timestamptz)
RETURNS TABLE (
    job_type      text,
    step_key      text,
    steps         bigint,
    failed        bigint,
    avg_seconds   double precision,
    p50_seconds   double precision,
    p95_seconds   double precision,
    max_seconds   double precision,
    last_ended_at timestamptz
)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT s.job_type,
           s.step_key,
           count(*),
           count(*) FILTER (WHERE s.step_status = 'FAILED'),
           avg(s.seconds),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY s.seconds),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY s.seconds),
           max(s.seconds),
           max(s.ended_at)
    FROM (
        SELECT e.job_type, e.step_key, e.step_status, e.ended_at,
               extract(epoch FROM job_duration(e.created_at, e.ended_at))::double precision
                   AS seconds
        FROM job_event AS e
        WHERE e.type = 'STEP' AND e.ended_at IS NOT NULL
          AND COALESCE(e.ended_at, e.created_at) >= COALESCE(closed_since, '-infinity')
    ) AS s
    GROUP BY s.job_type, s.step_key;
END;
