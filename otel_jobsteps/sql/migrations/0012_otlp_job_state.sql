-- What collect's last derivation of a job left open (its translators' open spans, its
-- recorder's open attempts, the latest time applied): a request whose spans all come later
-- resumes it instead of deriving the job from all its spans. NULL: derived in full next time.
ALTER TABLE otlp_job ADD COLUMN state bytea;

-- A request reads of its traces only what placing its spans needs (their copies and parents,
-- their staged children, the spans still waiting), not every span staged in them.
CREATE INDEX otlp_span_parent ON otlp_span (trace_id, parent);
CREATE INDEX otlp_span_waiting ON otlp_span (trace_id) WHERE domain IS NULL;
