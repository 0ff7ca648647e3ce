"""The core both doors share stays pure: no database, no environment, no SDK, no door.

Read from the source (every import statement, nested ones too), so a violation fails here
before anyone runs the code that makes it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import otel_jobsteps

CORE = Path(otel_jobsteps.__file__).parent / "_core"

# Outside the package: what does I/O, reads the process's environment, or reaches into the SDK.
BANNED = ("psycopg", "psycopg_pool", "os", "opentelemetry.sdk", "grpc", "starlette")
# Inside the package: the core itself, and the two public leaves it reads (attribute names, errors).
ALLOWED_OWN = ("otel_jobsteps._core", "otel_jobsteps.attributes", "otel_jobsteps.errors")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``; ``from . import x`` names x."""
    # a sample outside the package is read as a module of _core itself
    inner = path.parent.relative_to(CORE).parts if path.is_relative_to(CORE) else ()
    package = ".".join(["otel_jobsteps._core", *inner])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if node.module is None:
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
    return found


def _violations(path: Path) -> list[str]:
    bad = []
    for line, module in _imports(path):
        if module == "otel_jobsteps" or module.startswith("otel_jobsteps."):
            ok = any(module == own or module.startswith(own + ".") for own in ALLOWED_OWN)
        else:
            ok = not any(module == ban or module.startswith(ban + ".") for ban in BANNED)
        if not ok:
            bad.append(f"{path.name}:{line} imports {module}")
    return bad


@pytest.mark.parametrize(
    "path", sorted(CORE.rglob("*.py")), ids=lambda path: str(path.relative_to(CORE))
)
def test_the_core_imports_no_door_database_environment_or_sdk(path: Path) -> None:
    assert _violations(path) == []


def test_the_check_sees_what_it_bans(tmp_path: Path) -> None:
    """The check itself: each kind of forbidden import is caught, relative ones too."""
    source = tmp_path / "sample.py"
    source.write_text(
        "import os\nfrom psycopg import sql\nfrom opentelemetry.sdk.trace import Span\n"
        "from .._live import watch\nfrom .._ingest.derive import x\nfrom ..processor import P\n"
        "from .translate import T\nfrom ..errors import E\nfrom opentelemetry.trace import S\n"
        "def f():\n    from .._pg.store import StepStore\n"
    )
    assert [v.split(" imports ")[1] for v in _violations(source)] == [
        "os",
        "psycopg",
        "opentelemetry.sdk.trace",
        "otel_jobsteps._live",
        "otel_jobsteps._ingest.derive",
        "otel_jobsteps.processor",
        "otel_jobsteps._pg.store",
    ]
