-- The opt-in partitioned layout: `otel-jobsteps migrate --partitioned [--interval 1d]`.
-- Runs after the migrations, with search_path set to the target schema; safe to run again.
--
-- job_event and job_log stay the tables the writer names, unchanged, and hold what is current:
-- every open step, and every attempt that has not ended or ended in the current interval.
-- Finished attempts move, whole, into child tables (table inheritance) chosen by when the
-- attempt ended (its job_log created_at): job_event_pYYYYMMDDtHHMMSS and job_log_p... for the
-- interval starting then, under job_event_archive and job_log_archive (empty, so that "the
-- moved rows" is one name). Reading job_event or job_log reads the children too, so every view,
-- read query and maintenance statement sees one table as before. Retention drops whole children.
--
-- Why not declarative partitioning: a partitioned table's unique index must contain the
-- partition key, and the writer's ON CONFLICT names exactly (domain, job_id, attempt), so
-- "one open step per attempt" and "the first final row wins" could not stay unique indexes the
-- writer's statements use. Here they stay what they are on the current tables, and:
-- - no child ever holds an open step (CHECK closed_steps_only), so the one-open-step index of
--   the current table covers every open step there is; the same CHECK lets the planner skip
--   the children in every statement that looks for open steps (all the writer's updates);
-- - a final row for an attempt whose final row already moved is deleted again by a trigger
--   at the end of its INSERT statement (the first one won), before anyone else can see it.

CREATE TABLE IF NOT EXISTS otel_jobsteps_layout (
    singleton           boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    partition_interval  interval NOT NULL CHECK (partition_interval > interval '0')
);

COMMENT ON TABLE otel_jobsteps_layout IS
    'Present when job_event/job_log use the partitioned layout: the interval of one child.';

-- One row per interval that has children; prune drops both tables and the row together.
CREATE TABLE IF NOT EXISTS otel_jobsteps_partition (
    lower_bound  timestamptz PRIMARY KEY,
    upper_bound  timestamptz NOT NULL,
    job_event    text NOT NULL,
    job_log      text NOT NULL
);

-- The parents of the children: empty themselves. A child can never hold an open step, so the
-- one-open-step index of the current table covers every open step there is.
CREATE TABLE IF NOT EXISTS job_event_archive (
    CONSTRAINT closed_steps_only CHECK (type <> 'STEP' OR ended_at IS NOT NULL)
) INHERITS (job_event);
CREATE TABLE IF NOT EXISTS job_log_archive () INHERITS (job_log);

-- The lock that keeps movers and drops of one schema one at a time.
CREATE OR REPLACE FUNCTION otel_jobsteps_move_lock_key() RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT hashtextextended('otel_jobsteps:move:' || current_schema(), 0) $$
SET search_path FROM CURRENT;

-- The children of the interval holding ``at``, created when missing; returns its lower bound.
CREATE OR REPLACE FUNCTION otel_jobsteps_partition_for(at timestamptz) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_step   interval;
    v_lower  timestamptz;
    v_suffix text;
    v_event  text;
    v_log    text;
BEGIN
    SELECT partition_interval INTO STRICT v_step FROM otel_jobsteps_layout;
    v_lower := date_bin(v_step, at, timestamptz '2000-01-01 00:00:00+00');
    IF EXISTS (SELECT 1 FROM otel_jobsteps_partition WHERE lower_bound = v_lower) THEN
        RETURN v_lower;
    END IF;
    v_suffix := to_char(v_lower AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
    v_event := format('%I.%I', current_schema(), 'job_event_p' || v_suffix);
    v_log := format('%I.%I', current_schema(), 'job_log_p' || v_suffix);
    -- LIKE copies columns in order, CHECKs and every index (the primary key on id included);
    -- INHERIT then makes the child part of what job_event / job_log read.
    EXECUTE format('CREATE TABLE %s (LIKE job_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
                   ' INCLUDING INDEXES, CONSTRAINT closed_steps_only'
                   ' CHECK (type <> %L OR ended_at IS NOT NULL))', v_event, 'STEP');
    EXECUTE format('ALTER TABLE %s INHERIT job_event_archive', v_event);
    EXECUTE format('CREATE TABLE %s (LIKE job_log INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
                   ' INCLUDING INDEXES, CONSTRAINT ended_in_interval'
                   ' CHECK (created_at >= %L AND created_at < %L))',
                   v_log, v_lower, v_lower + v_step);
    EXECUTE format('ALTER TABLE %s INHERIT job_log_archive', v_log);
    INSERT INTO otel_jobsteps_partition VALUES (v_lower, v_lower + v_step, v_event, v_log);
    RETURN v_lower;
END $$
SET search_path FROM CURRENT;

-- Move one batch of finished attempts out of the current tables; returns how many attempts.
-- Finished: a job_log row ended before ``ended_before`` (default: the start of the current
-- interval) and no open step. Then, once none is left, rows that arrived in the current table
-- after their attempt had moved (a late step, closed since) follow it. Rows of an attempt
-- with an open step never move.
CREATE OR REPLACE FUNCTION otel_jobsteps_archive(batch_size integer,
                                                 ended_before timestamptz DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_step    interval;
    v_before  timestamptz;
    v_domain  text[];
    v_job_id  text[];
    v_attempt integer[];
    v_ended   timestamptz[];
    v_lower   timestamptz;
    v_part    otel_jobsteps_partition;
BEGIN
    SELECT partition_interval INTO STRICT v_step FROM otel_jobsteps_layout;
    v_before := COALESCE(ended_before,
                         date_bin(v_step, now(), timestamptz '2000-01-01 00:00:00+00'));
    -- One mover at a time: two never create the same child or move the same rows.
    PERFORM pg_advisory_xact_lock(otel_jobsteps_move_lock_key());
    SELECT array_agg(l.domain), array_agg(l.job_id), array_agg(l.attempt), array_agg(l.created_at)
    INTO v_domain, v_job_id, v_attempt, v_ended
    FROM (SELECT l.domain, l.job_id, l.attempt, l.created_at
          FROM ONLY job_log AS l
          WHERE l.created_at < v_before
            AND NOT EXISTS (SELECT 1 FROM ONLY job_event AS o
                            WHERE o.domain = l.domain AND o.job_id = l.job_id
                              AND o.attempt = l.attempt
                              AND o.type = 'STEP' AND o.ended_at IS NULL)
          ORDER BY l.created_at, l.id
          LIMIT batch_size
          FOR UPDATE SKIP LOCKED) AS l;
    IF v_domain IS NULL THEN
        -- Late rows of attempts that already moved: closed rows left in the current table
        -- before the cutoff (job_event_recent finds them: little else is left there).
        SELECT array_agg(s.domain), array_agg(s.job_id), array_agg(s.attempt),
               array_agg(s.created_at)
        INTO v_domain, v_job_id, v_attempt, v_ended
        FROM (SELECT DISTINCT e.domain, e.job_id, e.attempt, l.created_at
              FROM ONLY job_event AS e
              JOIN job_log_archive AS l
                ON l.domain = e.domain AND l.job_id = e.job_id AND l.attempt = e.attempt
              WHERE COALESCE(e.ended_at, e.created_at) < v_before
                AND NOT EXISTS (SELECT 1 FROM ONLY job_event AS o
                                WHERE o.domain = e.domain AND o.job_id = e.job_id
                                  AND o.attempt = e.attempt
                                  AND o.type = 'STEP' AND o.ended_at IS NULL)
              LIMIT batch_size) AS s;
        IF v_domain IS NULL THEN
            RETURN 0;
        END IF;
    END IF;
    FOR v_lower IN
        SELECT DISTINCT otel_jobsteps_partition_for(ended) FROM unnest(v_ended) AS ended
    LOOP
        SELECT * INTO STRICT v_part FROM otel_jobsteps_partition WHERE lower_bound = v_lower;
        EXECUTE format(
            'WITH batch AS (SELECT * FROM unnest($1, $2, $3, $4) AS t (domain, job_id, attempt, ended)'
            '               WHERE ended >= $5 AND ended < $6),'
            ' moved AS (DELETE FROM ONLY job_event AS e USING batch AS t'
            '           WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt'
            '             AND NOT (e.type = %L AND e.ended_at IS NULL)'
            '           RETURNING e.*)'
            ' INSERT INTO %s SELECT * FROM moved', 'STEP', v_part.job_event)
        USING v_domain, v_job_id, v_attempt, v_ended, v_part.lower_bound, v_part.upper_bound;
        EXECUTE format(
            'WITH batch AS (SELECT * FROM unnest($1, $2, $3, $4) AS t (domain, job_id, attempt, ended)'
            '               WHERE ended >= $5 AND ended < $6),'
            ' moved AS (DELETE FROM ONLY job_log AS l USING batch AS t'
            '           WHERE l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt'
            '           RETURNING l.*)'
            ' INSERT INTO %s SELECT * FROM moved', v_part.job_log)
        USING v_domain, v_job_id, v_attempt, v_ended, v_part.lower_bound, v_part.upper_bound;
    END LOOP;
    RETURN cardinality(v_domain);
END $$
SET search_path FROM CURRENT;

-- Drop the children of every interval that ended before ``cutoff``, unless one of their
-- attempts has an open step again (a late step): those stay, for prune's batches, which keep
-- such attempts. Returns what was dropped.
CREATE OR REPLACE FUNCTION otel_jobsteps_drop_partitions(cutoff timestamptz)
RETURNS TABLE (lower_bound timestamptz, job_logs bigint, job_events bigint)
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
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY job_event AS o JOIN %s AS l'
                       ' ON l.domain = o.domain AND l.job_id = o.job_id AND l.attempt = o.attempt'
                       ' WHERE o.type = %L AND o.ended_at IS NULL)', v_part.job_log, 'STEP')
        INTO v_open;
        CONTINUE WHEN v_open;
        lower_bound := v_part.lower_bound;
        EXECUTE format('SELECT count(*) FROM %s', v_part.job_log) INTO job_logs;
        EXECUTE format('SELECT count(*) FROM %s', v_part.job_event) INTO job_events;
        EXECUTE format('DROP TABLE %s, %s', v_part.job_event, v_part.job_log);
        DELETE FROM otel_jobsteps_partition AS p WHERE p.lower_bound = v_part.lower_bound;
        RETURN NEXT;
    END LOOP;
END $$
SET search_path FROM CURRENT;

-- The first final row of an attempt wins, also against one that has moved to a child: the
-- unique index of the current job_log sees only the current rows, so after each INSERT the new
-- rows whose attempt already has a moved final row are deleted again, before anyone else can
-- see them. One statement per INSERT: the children are opened once, not once per row. No lock
-- is needed against the mover: an insert that raced a move waited on the unique index until
-- the move committed, and this statement's snapshot is taken after that. EXECUTE, not a
-- plan cached by PL/pgSQL: the writer runs many statements in one transaction, and a plan
-- cached earlier in it would not know a child the mover created and filled meanwhile.
CREATE OR REPLACE FUNCTION otel_jobsteps_first_final_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'DELETE FROM ONLY job_log AS l USING inserted AS n WHERE l.id = n.id'
            ' AND EXISTS (SELECT 1 FROM job_log_archive AS a WHERE a.domain = n.domain'
            '             AND a.job_id = n.job_id AND a.attempt = n.attempt)';
    RETURN NULL;
END $$
-- As the layout's owner: the writer's role keeps needing only SELECT, INSERT and UPDATE.
SECURITY DEFINER
SET search_path FROM CURRENT;

DROP TRIGGER IF EXISTS first_final_row ON job_log;
CREATE TRIGGER first_final_row AFTER INSERT ON job_log
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION otel_jobsteps_first_final_row();
