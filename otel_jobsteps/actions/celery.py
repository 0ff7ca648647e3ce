"""Celery, through the app the file names (``app = "module:attribute"``: its broker, routes and
result backend; ``url`` overrides its broker). Retry sends the task again under the same id with
``retries`` one past the failed run's, so the worker records attempt N + 1; the name, arguments
and queue come from the result backend, which keeps them only with ``result_extended = True``.
Cancel revokes the id: workers running now drop it when it arrives; with force, a running one is
terminated (SIGTERM to its pool process)."""

from __future__ import annotations

import functools
import importlib
from typing import Any

from celery import Celery

from ..errors import ConfigurationError
from .answers import DONE, NOT_FOUND, REFUSED, Answer
from .config import DomainConfig

__all__ = ["cancel", "retry"]

_RETRYABLE = {"FAILURE", "REVOKED"}


def retry(config: DomainConfig, job_id: str, force: bool) -> Answer:
    app = _app(config)
    meta: dict[str, Any] = app.backend.get_task_meta(job_id)
    state = meta.get("status")
    if state == "PENDING" or not meta.get("name"):
        return Answer(
            NOT_FOUND,
            f"Celery's result backend keeps no task {job_id} with its arguments "
            "(retry needs result_extended = True)",
        )
    if state not in _RETRYABLE:
        return Answer(REFUSED, f"Celery retries failed or revoked tasks only; this one is {state}")
    retries = int(meta.get("retries") or 0) + 1
    queue = meta.get("queue")
    app.send_task(
        meta["name"],
        args=meta.get("args"),
        kwargs=meta.get("kwargs"),
        task_id=job_id,
        retries=retries,
        **({"queue": queue} if queue else {}),
    )
    return Answer(
        DONE, f"sent {meta['name']} again as run {retries + 1}" + (f" to {queue}" if queue else "")
    )


def cancel(config: DomainConfig, job_id: str, force: bool) -> Answer:
    app = _app(config)
    app.control.revoke(job_id, terminate=force)
    if force:
        return Answer(DONE, "revoked with terminate: a running task gets SIGTERM")
    return Answer(DONE, "revoked: workers drop it when it arrives")


@functools.cache
def _load(reference: str) -> Celery:
    module_name, _, attribute = reference.partition(":")
    try:
        app = getattr(importlib.import_module(module_name), attribute or "app")
    except (ImportError, AttributeError) as error:
        raise ConfigurationError(
            f"actions file: cannot load the Celery app {reference}: {error}"
        ) from None
    if not isinstance(app, Celery):
        raise ConfigurationError(f"actions file: {reference} is not a Celery app")
    return app


def _app(config: DomainConfig) -> Celery:
    return _app_for(str(config.option("app")), config.url or None)


@functools.cache
def _app_for(reference: str, url: str | None) -> Celery:
    """The app ``reference`` names; with ``url``, a copy of it whose broker is ``url``, one per
    URL: the named app is never changed (two domains on two brokers may act at once)."""
    app = _load(reference)
    if url is None:
        return app
    copy = Celery(app.main, set_as_current=False)
    copy.conf.update(dict(app.conf))
    copy.conf.broker_url = url
    return copy
