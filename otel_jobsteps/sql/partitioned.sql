-- The opt-in partitioned layout: `otel-jobsteps migrate --partitioned [--interval 1d]`.
-- Runs after the migrations, with search_path set to the target schema; safe to run again.
--
-- job_event stays the table the writer names, unchanged, and holds what is current: every open
-- step, and the rows of every attempt that has not ended or ended in the current interval.
-- Finished attempts' rows move, all together, into child tables (table inheritance) chosen by
-- when the attempt ended (its job_log created_at): job_event_pYYYYMMDDtHHMMSS for the interval
-- starting then, under job_event_archive (empty, so that "the moved rows" is one name).
-- Reading job_event reads the children too, so every view, read query and maintenance
-- statement sees one table as before. Retention drops whole children.
--
-- Why not declarative partitioning: a partitioned table's unique index must contain the
-- partition key, and the writer's ON CONFLICT names exactly (domain, job_id, attempt), so
-- "one open step per attempt" and "the first final row wins" could not stay unique indexes the
-- writer's statements use. Here both stay exactly what they are:
-- - no child ever holds an open step (CHECK closed_steps_only), so the one-open-step index of
--   the current job_event covers every open step there is; the same CHECK lets the planner
--   skip the children in every statement that looks for open steps (all the writer's updates);
-- - job_log, one narrow row per attempt, stays one table with its unique index (docs/scale.md,
--   "Why job_log stays one table"); prune deletes its old rows in batches, as in the default
--   layout.
-- Each child also has CHECK rows_before_upper_bound: every row's COALESCE(ended_at, created_at)
-- (what job_event_recent indexes, and what every windowed read compares) is before the end of
-- its interval, so a read whose window starts after that, with the start a constant in its plan,
-- skips the child (constraint exclusion). The mover places an attempt by its latest row, and
-- moves only rows before the child's end: the CHECK holds by construction, late rows included.

CREATE TABLE IF NOT EXISTS otel_jobsteps_layout (
    singleton           boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    partition_interval  interval NOT NULL CHECK (partition_interval > interval '0')
);

COMMENT ON TABLE otel_jobsteps_layout IS
    'Present when job_event uses the partitioned layout: the interval of one child table.';

-- One row per interval that has a child; prune drops the table and the row together.
CREATE TABLE IF NOT EXISTS otel_jobsteps_partition (
    lower_bound  timestamptz PRIMARY KEY,
    upper_bound  timestamptz NOT NULL,
    job_event    text NOT NULL
);

-- The parent of the children, empty itself.
CREATE TABLE IF NOT EXISTS job_event_archive (
    CONSTRAINT closed_steps_only CHECK (type <> 'STEP' OR ended_at IS NOT NULL)
) INHERITS (job_event);

-- The lock that keeps movers and drops of one schema one at a time.
CREATE OR REPLACE FUNCTION otel_jobsteps_move_lock_key() RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT hashtextextended('otel_jobsteps:move:' || current_schema(), 0) $$
SET search_path FROM CURRENT;

-- The start of the interval holding ``at``: intervals are aligned to UTC from 2000-01-01.
CREATE OR REPLACE FUNCTION otel_jobsteps_interval_start(at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT date_bin(partition_interval, at, timestamptz '2000-01-01 00:00:00+00')
    FROM otel_jobsteps_layout
$$
SET search_path FROM CURRENT;

-- The child of the interval holding ``at``, created when missing; returns its lower bound.
-- Run it in a transaction of its own (prune does): it waits for every transaction that has
-- read the children so far. A statement planned within a transaction keeps its list of
-- children until that transaction ends, so a child must not appear (and fill) under a
-- transaction that could still read job_event with the older list (the rows would seem gone);
-- the ACCESS EXCLUSIVE lock on the children's parent waits for such transactions and makes
-- every later one plan afresh. Rows only ever move into children that existed before the
-- mover's transaction began.
CREATE OR REPLACE FUNCTION otel_jobsteps_partition_for(at timestamptz) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_step   interval;
    v_lower  timestamptz;
    v_event  text;
BEGIN
    SELECT partition_interval INTO STRICT v_step FROM otel_jobsteps_layout;
    v_lower := otel_jobsteps_interval_start(at);
    IF EXISTS (SELECT 1 FROM otel_jobsteps_partition WHERE lower_bound = v_lower) THEN
        RETURN v_lower;
    END IF;
    LOCK TABLE job_event_archive IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM otel_jobsteps_partition WHERE lower_bound = v_lower) THEN
        RETURN v_lower;  -- created by another transaction while this one waited
    END IF;
    v_event := format('%I.%I', current_schema(),
                      'job_event_p' || to_char(v_lower AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS'));
    -- LIKE copies columns in order, CHECKs and every index (the primary key on id included);
    -- INHERIT then makes the child part of what job_event reads.
    EXECUTE format('CREATE TABLE %s (LIKE job_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
                   ' INCLUDING INDEXES, CONSTRAINT closed_steps_only'
                   ' CHECK (type <> %L OR ended_at IS NOT NULL),'
                   ' CONSTRAINT rows_before_upper_bound'
                   ' CHECK (COALESCE(ended_at, created_at) < %L::timestamptz))',
                   v_event, 'STEP', v_lower + v_step);
    EXECUTE format('ALTER TABLE %s INHERIT job_event_archive', v_event);
    INSERT INTO otel_jobsteps_partition VALUES (v_lower, v_lower + v_step, v_event);
    RETURN v_lower;
END $$
SET search_path FROM CURRENT;

-- The children for the current and the next interval, and for every interval a finished
-- attempt still in the current table will move into; returns how many were created. Prune runs
-- it in a transaction of its own before moving (see otel_jobsteps_partition_for).
CREATE OR REPLACE FUNCTION otel_jobsteps_prepare_partitions(ended_before timestamptz DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_step    interval;
    v_before  timestamptz;
    v_created integer := 0;
    v_at      timestamptz;
    v_event   text;
BEGIN
    SELECT partition_interval INTO STRICT v_step FROM otel_jobsteps_layout;
    v_before := COALESCE(ended_before, otel_jobsteps_interval_start(now()));
    PERFORM pg_advisory_xact_lock(otel_jobsteps_move_lock_key());
    -- Children made by an earlier version got rows_before_upper_bound NOT VALID (below): the
    -- planner uses it once validated. A scan of the child under SHARE UPDATE EXCLUSIVE, which
    -- readers, the writer and the mover do not wait for; once per child.
    FOR v_event IN
        SELECT p.job_event FROM otel_jobsteps_partition AS p
        JOIN pg_constraint AS c
          ON c.conrelid = p.job_event::regclass AND c.conname = 'rows_before_upper_bound'
        WHERE NOT c.convalidated
    LOOP
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT rows_before_upper_bound', v_event);
    END LOOP;
    FOR v_at IN
        SELECT now() UNION ALL SELECT now() + v_step
        UNION ALL
        -- where otel_jobsteps_archive will put each attempt: the interval of its latest row
        SELECT DISTINCT otel_jobsteps_interval_start(GREATEST(l.created_at, a.latest))
        FROM (SELECT e.domain, e.job_id, e.attempt,
                     max(COALESCE(e.ended_at, e.created_at)) AS latest
              FROM ONLY job_event AS e
              WHERE COALESCE(e.ended_at, e.created_at) < v_before
              GROUP BY e.domain, e.job_id, e.attempt) AS a
        JOIN job_log AS l ON l.domain = a.domain AND l.job_id = a.job_id AND l.attempt = a.attempt
        WHERE l.created_at < v_before
    LOOP
        IF NOT EXISTS (SELECT 1 FROM otel_jobsteps_partition AS p
                       WHERE v_at >= p.lower_bound AND v_at < p.upper_bound) THEN
            PERFORM otel_jobsteps_partition_for(v_at);
            v_created := v_created + 1;
        END IF;
    END LOOP;
    RETURN v_created;
END $$
SET search_path FROM CURRENT;

-- Move the finished attempts among the next ``batch_size`` rows of the current job_event, in
-- the order of when they last changed, after the cursor (after_at, after_id): all of an
-- attempt's rows go together, into the child of the interval of its latest row (its final row
-- or a later one: a late step, an event). Finished: a job_log row and every row of the attempt
-- dated before ``ended_before`` (default: the start of the current interval), no open step,
-- and that interval's child exists (otel_jobsteps_prepare_partitions). Returns the attempts
-- moved, the rows looked at (0: done) and the cursor to continue after. The cursor walks
-- job_event_recent, so rows that stay (open attempts, attempts without a final row) are passed
-- once per prune, not once per batch; a row that arrives after its attempt moved (a late step,
-- closed since) follows on a later prune, into its own interval's child when it is newer.
DROP FUNCTION IF EXISTS otel_jobsteps_archive(integer, timestamptz);
CREATE OR REPLACE FUNCTION otel_jobsteps_archive(
    batch_size integer,
    ended_before timestamptz,
    INOUT after_at timestamptz,
    INOUT after_id bigint,
    OUT attempts integer,
    OUT scanned integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_before  timestamptz;
    v_seen_at timestamptz[];
    v_seen_id bigint[];
    v_domain  text[];
    v_job_id  text[];
    v_attempt integer[];
    v_ended   timestamptz[];
    v_part    otel_jobsteps_partition;
BEGIN
    v_before := COALESCE(ended_before, otel_jobsteps_interval_start(now()));
    -- One mover at a time: two never move the same rows.
    PERFORM pg_advisory_xact_lock(otel_jobsteps_move_lock_key());
    -- The window: the next rows in job_event_recent's order, as arrays.
    SELECT array_agg(r.at ORDER BY r.at, r.id), array_agg(r.id ORDER BY r.at, r.id),
           array_agg(r.domain ORDER BY r.at, r.id), array_agg(r.job_id ORDER BY r.at, r.id),
           array_agg(r.attempt ORDER BY r.at, r.id)
    INTO v_seen_at, v_seen_id, v_domain, v_job_id, v_attempt
    FROM (SELECT COALESCE(e.ended_at, e.created_at) AS at, e.id, e.domain, e.job_id, e.attempt
          FROM ONLY job_event AS e
          WHERE COALESCE(e.ended_at, e.created_at) < v_before
            AND (COALESCE(e.ended_at, e.created_at), e.id) > (after_at, after_id)
          ORDER BY COALESCE(e.ended_at, e.created_at), e.id
          LIMIT batch_size) AS r;
    scanned := COALESCE(cardinality(v_seen_id), 0);
    attempts := 0;
    IF scanned = 0 THEN
        RETURN;
    END IF;
    -- The last row of the window is where the next one starts.
    after_at := v_seen_at[scanned];
    after_id := v_seen_id[scanned];
    SELECT array_agg(a.domain), array_agg(a.job_id), array_agg(a.attempt), array_agg(a.ended)
    INTO v_domain, v_job_id, v_attempt, v_ended
    -- the latest row as a LATERAL aggregate per attempt: job_log stays an index probe each
    FROM (SELECT DISTINCT w.domain, w.job_id, w.attempt, m.ended
          FROM unnest(v_domain, v_job_id, v_attempt) AS w (domain, job_id, attempt)
          JOIN job_log AS l
            ON l.domain = w.domain AND l.job_id = w.job_id AND l.attempt = w.attempt
          CROSS JOIN LATERAL (
              SELECT GREATEST(l.created_at, max(COALESCE(o.ended_at, o.created_at))) AS ended
              FROM ONLY job_event AS o
              WHERE o.domain = w.domain AND o.job_id = w.job_id AND o.attempt = w.attempt) AS m
          WHERE l.created_at < v_before AND m.ended < v_before
            AND NOT EXISTS (SELECT 1 FROM ONLY job_event AS o
                            WHERE o.domain = w.domain AND o.job_id = w.job_id
                              AND o.attempt = w.attempt
                              AND o.type = 'STEP' AND o.ended_at IS NULL)
            AND EXISTS (SELECT 1 FROM otel_jobsteps_partition AS p
                        WHERE m.ended >= p.lower_bound AND m.ended < p.upper_bound))
         AS a;
    IF v_domain IS NULL THEN
        RETURN;
    END IF;
    FOR v_part IN
        SELECT * FROM otel_jobsteps_partition AS p
        WHERE EXISTS (SELECT 1 FROM unnest(v_ended) AS ended
                      WHERE ended >= p.lower_bound AND ended < p.upper_bound)
    LOOP
        EXECUTE format(
            'WITH batch AS (SELECT * FROM unnest($1, $2, $3, $4) AS t (domain, job_id, attempt, ended)'
            '               WHERE ended >= $5 AND ended < $6),'
            ' moved AS (DELETE FROM ONLY job_event AS e USING batch AS t'
            '           WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt'
            '             AND NOT (e.type = %L AND e.ended_at IS NULL)'
            -- a row written since the attempt was chosen, newer than the child, stays for later
            '             AND COALESCE(e.ended_at, e.created_at) < $6'
            '           RETURNING e.*)'
            ' INSERT INTO %s SELECT * FROM moved', 'STEP', v_part.job_event)
        USING v_domain, v_job_id, v_attempt, v_ended, v_part.lower_bound, v_part.upper_bound;
    END LOOP;
    attempts := cardinality(v_domain);
END $$
SET search_path FROM CURRENT;

-- Drop the child of every interval that ended before ``cutoff``, unless one of its attempts
-- has an open step again (a late step): that one stays, for prune's batches, which keep such
-- attempts. Returns what was dropped.
CREATE OR REPLACE FUNCTION otel_jobsteps_drop_partitions(cutoff timestamptz)
RETURNS TABLE (lower_bound timestamptz, job_events bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_part otel_jobsteps_partition;
    v_open boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(otel_jobsteps_move_lock_key());
    FOR v_part IN
        SELECT * FROM otel_jobsteps_partition AS p WHERE p.upper_bound <= cutoff
        ORDER BY p.lower_bound
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY job_event AS o'
                       ' WHERE o.type = %L AND o.ended_at IS NULL'
                       ' AND EXISTS (SELECT 1 FROM %s AS m WHERE m.domain = o.domain'
                       '             AND m.job_id = o.job_id AND m.attempt = o.attempt))',
                       'STEP', v_part.job_event)
        INTO v_open;
        CONTINUE WHEN v_open;
        lower_bound := v_part.lower_bound;
        EXECUTE format('SELECT count(*) FROM %s', v_part.job_event) INTO job_events;
        EXECUTE format('DROP TABLE %s', v_part.job_event);
        DELETE FROM otel_jobsteps_partition AS p WHERE p.lower_bound = v_part.lower_bound;
        RETURN NEXT;
    END LOOP;
END $$
SET search_path FROM CURRENT;

-- Children made by an earlier version (without rows_before_upper_bound): it placed an attempt
-- by its final row, so a late row can be newer than the child's interval. Each gets the
-- constraint with a bound past its newest row (read through its job_event_recent), NOT VALID:
-- adding it takes only a moment, and new rows must satisfy it at once; the planner ignores it
-- until otel_jobsteps_prepare_partitions (prune) has validated it. Under the mover's lock, so
-- no row moves in between.
DO $$
DECLARE
    v_part   otel_jobsteps_partition;
    v_newest timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(otel_jobsteps_move_lock_key());
    FOR v_part IN
        SELECT p.* FROM otel_jobsteps_partition AS p
        WHERE NOT EXISTS (SELECT 1 FROM pg_constraint AS c
                          WHERE c.conrelid = p.job_event::regclass
                            AND c.conname = 'rows_before_upper_bound')
    LOOP
        EXECUTE format('SELECT max(COALESCE(ended_at, created_at)) FROM %s', v_part.job_event)
        INTO v_newest;
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT rows_before_upper_bound'
                       ' CHECK (COALESCE(ended_at, created_at) < %L::timestamptz) NOT VALID',
                       v_part.job_event,
                       GREATEST(v_part.upper_bound, v_newest + interval '1 microsecond'));
    END LOOP;
END $$;
