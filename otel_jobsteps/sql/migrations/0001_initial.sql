-- Steps and ordinary events of jobs, and one final row per finished attempt.
-- Runs with search_path set to the target schema, so names stay unqualified here.

CREATE TABLE job_event (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    domain        text        NOT NULL,
    job_id        text        NOT NULL,
    job_type      text,
    attempt       integer     NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    type          text        NOT NULL,
    step_key      text,
    step_status   text        CHECK (step_status IN ('RUNNING', 'COMPLETED', 'FAILED')),
    detail        jsonb,
    message       text,
    trace_id      text,
    span_id       text,
    -- Which execution owns an open row: a re-run of the same attempt must not write into it.
    execution_id  text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    -- Refreshed by the owning writer while the row is open: silence means the worker died.
    heartbeat_at  timestamptz,
    CHECK (type <> 'STEP' OR (step_key IS NOT NULL AND step_status IS NOT NULL))
);

-- The sequential model as a database fact: at most one open step per attempt.
-- Every guarded write names exactly this predicate so the planner can use the index.
CREATE UNIQUE INDEX job_event_one_open_step
    ON job_event (domain, job_id, attempt)
    WHERE type = 'STEP' AND ended_at IS NULL;

-- job_detail and the abandon sweep read one job's rows in order.
CREATE INDEX job_event_job ON job_event (domain, job_id, attempt, id);

CREATE TABLE job_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    domain      text        NOT NULL,
    job_id      text        NOT NULL,
    job_type    text,
    attempt     integer     NOT NULL CHECK (attempt >= 1),
    status      text        NOT NULL CHECK (status IN ('COMPLETED', 'FAILED')),
    reason      text,
    detail      jsonb,
    trace_id    text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- The first final state of an attempt wins; later writers are ignored.
    UNIQUE (domain, job_id, attempt)
);

-- "What failed in the last hour": recent attempts by status, newest first.
CREATE INDEX job_log_recent ON job_log (created_at DESC);
