-- OTLP ingest of log records (`POST /v1/logs`, gRPC LogsService): each record is kept here,
-- durably, beside the spans of its trace, until its attempt settles. A record belongs to the
-- attempt of the span its context names; until that span is placed it waits (domain NULL).
-- An attempt's records are read with its spans when it is derived, and fed in at their times.
CREATE TABLE otlp_log (
    trace_id    text        NOT NULL,  -- 32 hex digits, as otlp_span's
    span_id     bigint      NOT NULL,  -- the span of its context, signed as otlp_span's
    -- A digest of the record as received (its ids included) and of its place among identical
    -- records of its request: a copy delivered again conflicts with itself.
    key         bytea       PRIMARY KEY,
    seq         integer     NOT NULL,  -- its place in its request: breaks ties of equal times
    body        bytea,                 -- an OTLP protobuf LogRecord; NULL once settled
    domain      text,
    job_id      text,
    attempt     integer,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- A job's records, read with its spans when any of it arrives; an attempt's, when settled.
CREATE INDEX otlp_log_job ON otlp_log (domain, job_id, attempt);
-- Records still waiting for their span: by trace (read with every request touching it), and
-- oldest first (dropped after the open settle time).
CREATE INDEX otlp_log_waiting ON otlp_log (trace_id) WHERE domain IS NULL;
CREATE INDEX otlp_log_waiting_since ON otlp_log (received_at) WHERE domain IS NULL;

-- A step span's key kept with its skeleton: a record of a settled attempt (whose spans have no
-- body left) still finds the step its context lies in.
ALTER TABLE otlp_span ADD COLUMN step_key text;
