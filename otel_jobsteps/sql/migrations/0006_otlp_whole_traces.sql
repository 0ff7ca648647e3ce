-- OTLP ingest: a trace is settled once it is whole and quiet. One whose spans still wait (a
-- start marker without its ended copy, a step whose job span has not arrived: a long step of a
-- running job) is kept for the longer open settle time, so its later spans still count.
-- Traces staged before this migration count as whole (the earlier rule).
ALTER TABLE otlp_trace ADD COLUMN whole boolean NOT NULL DEFAULT true;

-- prune forgets tombstones of traces settled longer ago than its retention, oldest first.
CREATE INDEX otlp_trace_settled ON otlp_trace (touched_at) WHERE settled;
