"""The actions file (``--actions FILE``): where each domain's jobs live, per queue.

    [domains.render]
    queue = "rq"                 # celery | rq | arq | bullmq
    url_env = "BROKER_URL"       # or url = "redis://...": the broker, secrets from the env

Queue-specific keys: bullmq ``queue_name`` (default: the domain) and ``prefix`` ("bull"),
arq ``queue_name`` ("arq:queue"), celery ``app`` ("module:attribute", required; there the URL
is optional and overrides the app's broker). The broker URL is held out of every repr and
message: it may carry a password.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, describe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["QUEUES", "ActionsConfig", "DomainConfig", "load_actions"]

_OPTIONS: dict[str, dict[str, str | None]] = {  # queue -> its own keys and their defaults
    "celery": {"app": None},
    "rq": {},
    "arq": {"queue_name": "arq:queue"},
    "bullmq": {"queue_name": None, "prefix": "bull"},
}
QUEUES = tuple(_OPTIONS)
_COMMON = {"queue", "url", "url_env"}


@dataclass(frozen=True)
class DomainConfig:
    """One ``[domains.<domain>]`` table: its queue kind, broker URL and queue's own keys."""

    domain: str
    queue: str
    url: str = field(repr=False)
    options: Mapping[str, str | None] = field(default_factory=dict)

    def option(self, name: str) -> str | None:
        return self.options.get(name)


@dataclass(frozen=True)
class ActionsConfig:
    """Every domain the file names."""

    domains: Mapping[str, DomainConfig]

    def domain(self, name: str) -> DomainConfig:
        found = self.domains.get(name)
        if found is None:
            raise ConfigurationError(f"the actions file has no [domains.{name}] table")
        return found


def load_actions(path: str | Path, environ: Mapping[str, str] | None = None) -> ActionsConfig:
    """Read and check the actions file; any mistake is one ConfigurationError naming the key."""
    environ = os.environ if environ is None else environ
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as error:
        reason = describe(error)
        raise ConfigurationError(f"cannot read the actions file {path}: {reason}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigurationError(f"the actions file {path} is not TOML: {error}") from None
    unknown = sorted(set(document) - {"domains"})
    if unknown:
        raise ConfigurationError(f"actions file: unknown key {unknown[0]!r} (only [domains.*])")
    tables = document.get("domains", {})
    if not isinstance(tables, dict) or not tables:
        raise ConfigurationError("actions file: no [domains.<domain>] table")
    return ActionsConfig({name: _domain(name, table, environ) for name, table in tables.items()})


def _domain(name: str, table: Any, environ: Mapping[str, str]) -> DomainConfig:
    where = f"domains.{name}"
    if not isinstance(table, dict):
        raise ConfigurationError(f"actions file: {where} must be a table")
    queue = table.get("queue")
    if queue not in QUEUES:
        raise ConfigurationError(f"actions file: {where}.queue must be one of {', '.join(QUEUES)}")
    own = _OPTIONS[queue]
    unknown = sorted(set(table) - _COMMON - set(own))
    if unknown:
        raise ConfigurationError(f"actions file: unknown key {where}.{unknown[0]} for {queue}")
    options = {key: _text(table, key, where, default) for key, default in own.items()}
    if queue == "celery":
        if options["app"] is None:
            raise ConfigurationError(f"actions file: {where}.app is required (module:attribute)")
        if "url" not in table and "url_env" not in table:  # the app's own broker
            return DomainConfig(name, queue, "", options)
    return DomainConfig(name, queue, _url(table, where, environ), options)


def _text(table: Mapping[str, Any], key: str, where: str, default: str | None) -> str | None:
    value = table.get(key, default)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigurationError(f"actions file: {where}.{key} must be a non-empty string")
    return value


def _url(table: Mapping[str, Any], where: str, environ: Mapping[str, str]) -> str:
    url, variable = _text(table, "url", where, None), _text(table, "url_env", where, None)
    if (url is None) == (variable is None):
        raise ConfigurationError(f"actions file: {where} needs exactly one of url, url_env")
    if variable is not None:
        url = environ.get(variable)
        if not url:
            raise ConfigurationError(f"actions file: {where}.url_env names {variable}, not set")
    assert url is not None
    return url
