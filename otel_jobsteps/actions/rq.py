"""RQ: retry requeues a failed job from its FailedJobRegistry (its worker numbers the run
N + 1 from the job's meta); cancel cancels a queued, deferred or scheduled job, and with
force sends the stop-job command to the worker of a started one."""

from __future__ import annotations

from collections.abc import Callable

from redis import Redis
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus

from .answers import DONE, NOT_FOUND, REFUSED, Answer
from .config import DomainConfig

__all__ = ["cancel", "retry"]

_CANCELLABLE = {JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED}


def retry(config: DomainConfig, job_id: str, force: bool) -> Answer:
    return _act(config, job_id, lambda job, status: _retry(job, status))


def cancel(config: DomainConfig, job_id: str, force: bool) -> Answer:
    return _act(config, job_id, lambda job, status: _cancel(job, status, force))


def _act(config: DomainConfig, job_id: str, action: Callable[[Job, JobStatus], Answer]) -> Answer:
    with Redis.from_url(config.url) as connection:
        try:
            job = Job.fetch(job_id, connection=connection)
        except NoSuchJobError:
            return Answer(NOT_FOUND, f"RQ has no job {job_id}")
        except ValueError:  # RQ 2+ takes ids of letters, digits, _ and - only
            return Answer(NOT_FOUND, f"RQ has no job {job_id} (not an id RQ takes)")
        return action(job, job.get_status())


def _retry(job: Job, status: JobStatus) -> Answer:
    if status != JobStatus.FAILED:
        return Answer(REFUSED, f"RQ requeues failed jobs only; this one is {status.value}")
    try:
        job.requeue()
    except InvalidJobOperation:
        return Answer(REFUSED, "RQ: the job is no longer in its FailedJobRegistry")
    return Answer(DONE, f"requeued on {job.origin}")


def _cancel(job: Job, status: JobStatus, force: bool) -> Answer:
    if status in _CANCELLABLE:
        job.cancel()
        return Answer(DONE, f"canceled ({status.value} on {job.origin})")
    if status != JobStatus.STARTED:
        return Answer(REFUSED, f"RQ cancels waiting or running jobs; this one is {status.value}")
    if not force:
        return Answer(REFUSED, "RQ: the job is running; force sends it the stop command")
    try:
        send_stop_job_command(job.connection, job.id)
    except InvalidJobOperation as error:
        return Answer(REFUSED, f"RQ: {error}")
    return Answer(DONE, f"stop-job command sent to {job.worker_name}")
