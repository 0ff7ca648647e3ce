"""The README's code blocks, run so they cannot rot.

Every block is marked ``python`` or ``bash``. The Python blocks run in order in one namespace
against the test database (the README's ``postgresql://localhost/app`` stands for it); a block
after a ``<!-- compile only -->`` line (fragments of several setups) is compiled, not run. The
shell blocks' commands must exist: programs on PATH, files and folders of the checkout, the
extras named in pip lines, and every ``otel-jobsteps`` subcommand with the options it is given.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from otel_jobsteps import job_detail

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PLACEHOLDER_DSN = "postgresql://localhost/app"
COMPILE_ONLY = "<!-- compile only -->"
_FENCE = re.compile(r"^```(\S*)\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_EXTRAS = re.compile(r"\[([a-z0-9_,-]+)\]$")
_SEPARATORS = {"&&", "||", "|", ";", "&"}


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    compile_only: bool


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with the marker line before each."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        marker = lines[index - 1].strip() if index else ""
        code = "\n".join(lines[index + 1 : end]) + "\n"
        blocks.append(Block(opening.group(1), code, index + 1, marker == COMPILE_ONLY))
        index = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text("utf-8"))


def _blocks(language: str) -> list[Block]:
    return [b for b in BLOCKS if b.language == language]


def test_the_readme_fits_its_budget_of_3500_words() -> None:
    words = len(README.read_text("utf-8").split())
    assert words <= 3500, f"README.md has {words} words; move detail to docs/"


def test_every_block_says_whether_it_is_shell_or_python() -> None:
    unmarked = [(b.line, b.language) for b in BLOCKS if b.language not in ("python", "bash")]
    assert not unmarked, f"README blocks not marked python or bash (line, language): {unmarked}"
    assert _blocks("python")
    assert _blocks("bash")


def test_the_python_blocks_run_against_the_test_database(dsn: str) -> None:
    pytest.importorskip("celery")  # the zero-code section's app
    namespace: dict[str, Any] = {"__name__": "readme"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in _blocks("python"):
            code = compile(
                block.code.replace(PLACEHOLDER_DSN, dsn), f"README.md:{block.line}", "exec"
            )
            if not block.compile_only:
                exec(code, namespace)
    # The quickstart printed the steps it recorded, read back from the database.
    assert "key='RENDER'" in printed.getvalue()
    assert "key='SAVE'" in printed.getvalue()
    assert "status='COMPLETED'" in printed.getvalue()
    # The plain tracer's job, with its progress as the step's detail.
    plain = job_detail(dsn, "render", "42")
    assert plain is not None
    assert [(s.key, s.status, s.detail) for s in plain.steps] == [
        ("RENDER", "COMPLETED", {"pct": 40})
    ]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize(
    "page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_links_point_at_files_and_headings_that_exist(page: Path) -> None:
    """The README's and docs' relative links, after the split moved text between them."""
    for target in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", page.read_text("utf-8")):
        path, anchor = (page.parent / target[0]) if target[0] else page, target[1]
        assert path.exists(), f"{page.name} links to {target[0]}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text("utf-8"), re.MULTILINE)
            assert anchor in {_anchor(h) for h in headings}, f"no heading #{anchor} in {path}"


def test_the_zero_code_app_is_the_example_that_test_examples_runs() -> None:
    """The README's Celery app, from its ``app = Celery(`` on, is the example's code verbatim."""
    (app,) = [b.code for b in _blocks("python") if b.code.startswith("# app.py")]
    body = app[app.index("app = Celery(") :]
    assert body in (ROOT / "examples" / "zero_code_celery.py").read_text("utf-8")


def _commands(block: Block) -> list[list[str]]:
    """Each simple command of a shell block, as words, without leading VAR=value words."""
    commands: list[list[str]] = []
    for line in block.code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for word in [*lexer, ";"]:
            if word in _SEPARATORS:
                if words:
                    commands.append(words)
                words = []
            elif words or not _ASSIGNMENT.match(word):
                words.append(word)
    return commands


@cache
def _extras() -> frozenset[str]:
    return frozenset(importlib.metadata.metadata("otel_jobsteps").get_all("Provides-Extra") or ())


@cache
def _help(subcommand: str) -> str:
    result = subprocess.run(
        [_program("otel-jobsteps"), subcommand, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"otel-jobsteps {subcommand}: {result.stderr}"
    return result.stdout


def _program(name: str) -> str:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which(name, path=path)
    assert found, f"README runs {name!r}, which is not installed"
    return found


def _check_command(words: list[str]) -> None:
    program, *args = words
    if program == "opentelemetry-instrument":  # runs the command that follows
        _program(program)
        _check_command(args)
    elif program == "pip":
        for arg in args:
            if extras := _EXTRAS.search(arg):
                unknown = set(extras.group(1).split(",")) - _extras()
                assert not unknown, f"pip line names extras pyproject.toml lacks: {unknown}"
    elif program == "otel-jobsteps":
        if args and not args[0].startswith("-"):
            help_text = _help(args[0])
            for option in (a.split("=")[0] for a in args[1:] if a.startswith("--")):
                assert option in help_text, f"otel-jobsteps {args[0]} has no option {option}"
    elif program == "bash":
        assert (ROOT / args[0]).is_file(), f"README runs bash {args[0]}, which does not exist"
    elif program == "node":
        assert list((ROOT / "examples").rglob(args[0])), f"no examples/**/{args[0]}"
    elif program == "cd":
        assert (ROOT / args[0]).is_dir(), f"README changes to {args[0]}, which does not exist"
    else:
        _program(program)


@pytest.mark.parametrize("block", _blocks("bash"), ids=lambda b: f"line{b.line}")
def test_the_shell_blocks_commands_exist(block: Block) -> None:
    commands = _commands(block)
    assert commands
    for words in commands:
        _check_command(words)


def test_the_shell_check_sees_a_missing_option() -> None:
    """The check above can fail: a made-up option and extra are refused."""
    with pytest.raises(AssertionError, match="has no option --no-such-option"):
        _check_command(["otel-jobsteps", "demo", "--no-such-option"])
    with pytest.raises(AssertionError, match="no_such_extra"):
        _check_command(["pip", "install", ".[web,no_such_extra]"])
