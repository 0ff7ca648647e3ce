-- OTLP ingest: the job, not the trace, is the unit of derivation. A job's rows are derived from
-- the staged spans of all its attempts that are not settled, whichever traces they came in;
-- an attempt is settled on its own once it has its final row and nothing of it is pending.
-- Spans staged before this migration carry no place: they count as outside any job and are
-- dropped after the open settle time (upgrade once collect's traces have settled).

-- What staging knows of a span without decoding it again: its parent, what kind of span it is,
-- the attempt it names itself (a job span, an event span naming a job) and the attempt it
-- belongs to (NULL: still waiting for a parent). A settled attempt's spans keep their row
-- without a body: a late copy of them, or a late child, is recognised and dropped.
ALTER TABLE otlp_span
    ADD COLUMN parent bigint NOT NULL DEFAULT 0,
    ADD COLUMN kind smallint NOT NULL DEFAULT 0,  -- 0 plain or step, 1 job, 2 event, 3 event naming a job
    ADD COLUMN own jsonb,                         -- [domain, job_id, attempt] it names itself
    ADD COLUMN domain text,
    ADD COLUMN job_id text,
    ADD COLUMN attempt integer,
    ALTER COLUMN body DROP NOT NULL;

-- A job's spans, read whole when any span of the job arrives; an attempt's, when settled.
CREATE INDEX otlp_span_job ON otlp_span (domain, job_id, attempt);

-- One row per job: the lock its derivations take (after their traces', in sorted order).
CREATE TABLE otlp_job (
    domain      text        NOT NULL,
    job_id      text        NOT NULL,
    touched_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (domain, job_id)
);
CREATE INDEX otlp_job_touched ON otlp_job (touched_at);  -- prune forgets idle ones

-- One row per attempt collect derived: whether it has its final row, whether a span of it is
-- still open (a start marker without its ended copy), whether it is settled, and where and
-- when its job span started.
CREATE TABLE otlp_attempt (
    domain      text        NOT NULL,
    job_id      text        NOT NULL,
    attempt     integer     NOT NULL,
    final       boolean     NOT NULL DEFAULT false,
    pending     boolean     NOT NULL DEFAULT false,
    settled     boolean     NOT NULL DEFAULT false,
    touched_at  timestamptz NOT NULL DEFAULT now(),
    -- Its job span's start: once settled, it still abandons an earlier attempt arriving late.
    trace_id    text,
    span_id     bigint,
    start_ns    bigint,  -- unsigned nanoseconds as a signed bigint, as span ids
    PRIMARY KEY (domain, job_id, attempt)
);

-- The settle pass reads the oldest unsettled attempts; prune the oldest settled ones.
CREATE INDEX otlp_attempt_unsettled ON otlp_attempt (touched_at) WHERE NOT settled;
CREATE INDEX otlp_attempt_settled ON otlp_attempt (touched_at) WHERE settled;

-- Spans still waiting for their job, by trace age (dropped after the open settle time).
CREATE INDEX otlp_trace_touched ON otlp_trace (touched_at);
DROP INDEX otlp_trace_unsettled_whole;
DROP INDEX otlp_trace_unsettled_waiting;
DROP INDEX otlp_trace_settled;
ALTER TABLE otlp_trace DROP COLUMN settled, DROP COLUMN whole, DROP COLUMN written;
