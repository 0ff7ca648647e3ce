-- OTLP ingest (`otel-jobsteps collect`): received spans are kept here, durably, so a 200 means
-- they are safe. A trace's rows in job_event / job_log are always derived from all of its
-- spans received so far; this is what makes arrival order, splits and duplicates irrelevant.

-- One row per received trace: a lock while its rows are derived, and what the last
-- derivation wrote (so the next one replaces exactly those rows).
CREATE TABLE otlp_trace (
    trace_id    text        PRIMARY KEY,                -- 32 hex digits, as job_event.trace_id
    -- [[domain, job_id, attempt], ...] the last derivation wrote; NULL: none so far.
    written     jsonb,
    span_count  integer     NOT NULL DEFAULT 0,
    -- Settled: its spans are gone, late spans of it are dropped (counted).
    settled     boolean     NOT NULL DEFAULT false,
    touched_at  timestamptz NOT NULL DEFAULT now()
);

-- The settle pass reads the oldest unsettled traces.
CREATE INDEX otlp_trace_unsettled ON otlp_trace (touched_at) WHERE NOT settled;

-- Received spans of unsettled traces; a duplicate delivery conflicts with itself.
CREATE TABLE otlp_span (
    trace_id  text     NOT NULL,
    span_id   bigint   NOT NULL,  -- the 64-bit id as a signed integer
    phase     smallint NOT NULL,  -- 0: start marker (running), 1: ended
    body      bytea    NOT NULL,  -- the span as received: an OTLP protobuf Span
    PRIMARY KEY (trace_id, span_id, phase)
);
