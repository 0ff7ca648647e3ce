-- OTLP ingest: a trace is settled once it is whole and quiet. One whose spans still wait (a
-- start marker without its ended copy, a step whose job span has not arrived: a long step of a
-- running job, or no job span yet) is kept for the longer open settle time, so its later spans
-- still count. Traces staged before this migration count as whole (the earlier rule).
ALTER TABLE otlp_trace ADD COLUMN whole boolean NOT NULL DEFAULT true;

-- The settle pass reads each kind's oldest unsettled traces by its own index: waiting traces,
-- kept for a day, must not be read again by every round that settles whole ones.
DROP INDEX otlp_trace_unsettled;
CREATE INDEX otlp_trace_unsettled_whole ON otlp_trace (touched_at) WHERE NOT settled AND whole;
CREATE INDEX otlp_trace_unsettled_waiting ON otlp_trace (touched_at)
    WHERE NOT settled AND NOT whole;

-- prune forgets tombstones of traces settled longer ago than its retention, oldest first.
CREATE INDEX otlp_trace_settled ON otlp_trace (touched_at) WHERE settled;
