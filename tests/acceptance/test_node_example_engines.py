"""The Node example's lock file installs only packages whose ``engines`` accept the Node.js
version its ``package.json`` and README promise: ``npm ci`` warns about none (EBADENGINE)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-bullmq"


def _bounds(comparator: str) -> list[tuple[str, Version]]:
    """One npm comparator (``>=20.6.0``, ``^18.19.0``, ``<1.10.0``, ``20``) as (operator,
    version) pairs; a caret allows up to the next major (no 0.x caret is read here)."""
    found = re.fullmatch(r"(\^|>=|<=|>|<|=)?v?([\d.]+)", comparator)
    if found is None:
        raise ValueError(f"an npm comparator this check does not read: {comparator!r}")
    operator, text = found.groups()
    version = Version(text)
    if operator == "^":
        return [(">=", version), ("<", Version(f"{version.major + 1}"))]
    return [(operator or "=", version)]


def satisfies(version: Version, npm_range: str) -> bool:
    """Whether ``version`` satisfies an npm range made of ``||`` alternatives of comparators."""
    checks = {
        ">=": version.__ge__, ">": version.__gt__, "<=": version.__le__, "<": version.__lt__,
        "=": version.__eq__,
    }  # fmt: skip
    return any(
        all(checks[op](bound) for part in alternative.split() for op, bound in _bounds(part))
        for alternative in npm_range.split("||")
    )


@pytest.mark.parametrize(
    ("npm_range", "expected"),
    [
        pytest.param("^18.19.0 || >=20.6.0", True, id="caret-or-at-least"),
        pytest.param(">=22.15.0", False, id="newer-only"),
        pytest.param("^18.19.0", False, id="caret-older-major"),
        pytest.param(">=8.0.0", True, id="old-floor"),
    ],
)
def test_the_range_check_reads_npm_ranges(npm_range: str, expected: bool) -> None:
    assert satisfies(Version("20.6.0"), npm_range) is expected


def test_every_locked_package_accepts_the_node_version_the_example_promises() -> None:
    promised = json.loads((EXAMPLE / "package.json").read_text("utf-8"))["engines"]["node"]
    oldest = Version(promised.removeprefix(">="))
    assert f"Node.js {oldest.major}" in (EXAMPLE / "README.md").read_text("utf-8")
    lock = json.loads((EXAMPLE / "package-lock.json").read_text("utf-8"))
    refusing = {
        path: package["engines"]["node"]
        for path, package in lock["packages"].items()
        if path and "node" in package.get("engines", {})
        if not satisfies(oldest, package["engines"]["node"])
    }
    assert refusing == {}, f"packages that refuse Node.js {oldest}"
