"""The words written into the tables and read back: row types, statuses, reasons, outcomes.

One definition each, used by the Python code; tests/unit/test_vocabulary.py checks that every
such word the SQL files spell is one of these.
"""

from __future__ import annotations

__all__ = [
    "ABANDONED",
    "CANCELLED",
    "COMPLETED",
    "ERROR",
    "EVENT_ACTION",
    "EVENT_NAMED_STEP",
    "EVENT_RETRY_SCHEDULED",
    "EVENT_STALLED",
    "FAILED",
    "LOG",
    "MAX_ATTEMPT",
    "MAX_ID_CHARS",
    "OUTCOME_COMPLETED",
    "OUTCOME_RECLAIMED",
    "OUTCOME_RETRY",
    "OUTCOME_TARGET_DELETED",
    "OUTCOME_TIME_LIMIT",
    "RUNNING",
    "SKIPPED",
    "STATUSES",
    "STEP",
    "STEP_STATUSES",
    "TAG",
    "TIME_LIMIT",
]

MAX_ATTEMPT = 2**31 - 1  # the highest attempt number: job_event.attempt is an int column
MAX_ID_CHARS = 512  # the longest domain, job id, job type or execution id written

# job_event.type of a step row; every other type is an ordinary event.
STEP = "STEP"
# job_event.type of a tag of an attempt (job.tag.<name>): step_key is its name, message its
# value; written once, at the attempt's start. Not an ordinary event: the reads leave it out.
TAG = "TAG"
# job_event.type of a log line of an attempt (a log record in its scope): step_key is the step
# open in the record's context, message its body; never a step, never counted as an event.
LOG = "LOG"
EVENT_NAMED_STEP = "EVENT:STEP"
"""The type an ordinary event named ``STEP`` by its code is written with (not a step row)."""
EVENT_STALLED = "STALLED"
"""Ordinary event of an attempt whose worker the queue reported lost."""
EVENT_RETRY_SCHEDULED = "RETRY_SCHEDULED"
"""Ordinary event of an attempt after which the queue scheduled another one."""
EVENT_ACTION = "ACTION"
"""Ordinary event of an operator's retry or cancel (otel_jobsteps.actions): the audit row."""

# An attempt's status (job_log.status, never RUNNING: RUNNING is an attempt without one), and
# job_event.step_status, which may also be SKIPPED.
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
STATUSES = (RUNNING, COMPLETED, FAILED)
SKIPPED = "SKIPPED"
"""A step skipped, not run (issue 37: a CI/CD task run with result ``skip``): ended as it is
written, never the open step, never an attempt's failing step."""
STEP_STATUSES = (*STATUSES, SKIPPED)

# job_log.reason (and a FAILED step's message) when the database or the model decides it.
ABANDONED = "abandoned"
"""A later attempt, another execution or `sweep` settled what a silent worker left open."""
TIME_LIMIT = "time_limit"
"""Finished after the attempt's ``job.time_limit``."""
ERROR = "error"
"""The job span ended with status ERROR."""
CANCELLED = "cancelled"
"""The job span ended with a CancelledError."""

# job.outcome values: any other non-empty outcome is written as the reason of a FAILED attempt.
OUTCOME_COMPLETED = "completed"
"""``job.outcome`` that changes nothing: the span's status decides."""
OUTCOME_TARGET_DELETED = "target_deleted"
"""``job.outcome`` of the "target deleted" failure path."""
OUTCOME_RETRY = "retry"
"""``job.outcome`` of an attempt that failed and that the queue will run again."""
OUTCOME_TIME_LIMIT = TIME_LIMIT
"""``job.outcome`` of an attempt the queue's time limit interrupted."""
OUTCOME_RECLAIMED = "reclaimed"
"""``job.outcome`` of a run that finished after the queue had taken the job back."""
