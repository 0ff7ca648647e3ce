"""The user's own rules (``--mapping``): which attributes of another library's job span name
the job. Each rule is a dialect, tried before the built-in ones (it is explicit)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_TYPE
from ...errors import ConfigurationError
from ..facts import SpanFacts
from .base import Dialect, Gate, number, with_defaults

__all__ = ["JobMapping", "mapping_dialect"]

_MAPPING_PART = re.compile(r"^(id|domain|type|attempt)=([^=+,\s]+)(?:\+(\d{1,3}))?$")


@dataclass(frozen=True, slots=True)
class JobMapping:
    """Which attributes of another library's job span name the job (``--mapping``).

    A span with the ``job_id`` attribute and no ``job.id`` is a job span. ``attempt_offset``
    is added to the attempt attribute: 1 where the library counts the attempts made before.
    Without an attempt attribute the attempt is 1.
    """

    job_id: str
    domain: str
    job_type: str | None = None
    attempt: str | None = None
    attempt_offset: int = 0

    @classmethod
    def parse(cls, text: str) -> JobMapping:
        """``id=ATTR,domain=ATTR[,type=ATTR][,attempt=ATTR[+N]]``."""
        found: dict[str, tuple[str, int]] = {}
        for part in text.split(","):
            match = _MAPPING_PART.match(part.strip())
            if match is None:
                raise ConfigurationError(
                    f"invalid mapping part {part.strip()!r}: use "
                    "id=ATTR,domain=ATTR[,type=ATTR][,attempt=ATTR[+N]]"
                )
            name, attribute, offset = match.groups()
            if name in found or (offset and name != "attempt"):
                raise ConfigurationError(f"invalid mapping {text!r}: {name} twice or with +N")
            found[name] = (attribute, int(offset or 0))
        if "id" not in found or "domain" not in found:
            raise ConfigurationError(f"invalid mapping {text!r}: id= and domain= are required")
        attempt = found.get("attempt")
        return cls(
            job_id=found["id"][0],
            domain=found["domain"][0],
            job_type=found["type"][0] if "type" in found else None,
            attempt=attempt[0] if attempt else None,
            attempt_offset=attempt[1] if attempt else 0,
        )


def mapping_dialect(mapping: JobMapping) -> Dialect:
    """``mapping`` as a dialect: a span with its id attribute is a job span (only that span)."""

    def may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
        return mapping.job_id in attributes

    def recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
        return [with_defaults(unit[0], _job(mapping, unit[0].attributes)), *unit[1:]]

    return Dialect(
        "mapping",
        f"--mapping id={mapping.job_id}",
        may_start_job,
        recognise,
        gate=Gate(attributes=frozenset({mapping.job_id})),
    )


def _job(mapping: JobMapping, attributes: Mapping[str, Any]) -> dict[str, Any]:
    attempt = 1
    if mapping.attempt is not None:
        value = number(attributes.get(mapping.attempt))
        attempt = 0 if value is None else value + mapping.attempt_offset  # 0: rejected
    return {
        JOB_ID: attributes.get(mapping.job_id),
        JOB_DOMAIN: attributes.get(mapping.domain),
        JOB_TYPE: None if mapping.job_type is None else attributes.get(mapping.job_type),
        JOB_ATTEMPT: attempt,
    }
