"""A dialect's gate is necessary: no span it keeps out would have been claimed, so asking the
gate first (one set test for every dialect of a span's kind) changes no answer."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from otel_jobsteps._core.dialects import DIALECT_NAMES, select_dialects

ALL = select_dialects("all")
GATES = {dialect.name: dialect.gate for dialect in ALL.dialects}
KEYS = sorted(
    {key for gate in GATES.values() if gate is not None for key in gate.attributes}
    | {"messaging.operation", "messaging.operation.type", "messaging.message.id", "http.route"}
)
PREFIXES = sorted({p for gate in GATES.values() if gate is not None for p in gate.prefixes})
VALUES = (
    st.sampled_from(
        ["process", "receive", "workflow", "step", "oban", "sidekiq", "invoke_agent", "chat", "x"]
    )
    | st.booleans()
    | st.integers(0, 3)
)
NAMES = st.builds(lambda prefix, rest: prefix + rest, st.sampled_from(["", *PREFIXES]), st.text())


def _passes(name: str, attributes: dict[str, Any], dialect_name: str) -> bool:
    gate = GATES[dialect_name]
    assert gate is not None
    return not gate.attributes.isdisjoint(attributes) or name.startswith(gate.prefixes)


def test_every_dialect_but_messaging_has_a_gate() -> None:
    assert {name for name, gate in GATES.items() if gate is None} == {"messaging"}
    assert set(GATES) == set(DIALECT_NAMES)


@given(
    name=NAMES,
    kind=st.integers(0, 5),
    attributes=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6),
)
def test_a_span_a_dialect_claims_passes_its_gate(
    name: str, kind: int, attributes: dict[str, Any]
) -> None:
    for dialect in ALL.dialects:
        if dialect.gate is not None and dialect.may_start_job(name, kind, attributes):
            assert _passes(name, attributes, dialect.name), dialect.name
    claimed = ALL.may_start_job(name, kind, attributes)
    first = next((d for d in ALL.dialects if _claims(d, name, kind, attributes)), None)
    assert claimed is first  # the gates change no answer


def _claims(dialect: Any, name: str, kind: int, attributes: dict[str, Any]) -> bool:
    kinds = dialect.kinds
    return (kinds is None or kind in kinds) and bool(dialect.may_start_job(name, kind, attributes))
