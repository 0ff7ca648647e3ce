"""The actions file: what it accepts, and one line naming the key for what it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_jobsteps.actions import load_actions
from otel_jobsteps.cli import main
from otel_jobsteps.errors import ConfigurationError

SECRET = "redis://:hunter2@broker:6379/0"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "actions.toml"
    path.write_text(text)
    return path


def test_the_url_comes_from_the_variable_the_file_names_and_is_never_shown(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[domains.render]\nqueue = "bullmq"\nurl_env = "BROKER_URL"\n')

    domain = load_actions(path, {"BROKER_URL": SECRET}).domain("render")

    assert (domain.queue, domain.url) == ("bullmq", SECRET)
    assert domain.options == {"queue_name": None, "prefix": "bull"}
    assert "hunter2" not in repr(domain)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[domains.a]\nqueue = 'sqs'\nurl = 'x'\n", "domains.a.queue must be one of"),
        ("[domains.a]\nqueue = 'rq'\n", "domains.a needs exactly one of url, url_env"),
        ("[domains.a]\nqueue = 'rq'\nurl_env = 'NOPE'\n", "domains.a.url_env names NOPE, not set"),
        ("[domains.a]\nqueue = 'rq'\nurl = 'x'\nprefix = 'p'\n", "unknown key domains.a.prefix"),
        ("[domains.a]\nqueue = 'celery'\nurl = 'x'\n", "domains.a.app is required"),
        ("[domains.a]\nqueue = 'arq'\nurl = 'x'\nqueue_name = 3\n", "domains.a.queue_name must"),
        ("[other]\n", "unknown key 'other'"),
        ("queue = [\n", "is not TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error) as raised:
        load_actions(write(tmp_path, text), {})
    assert "\n" not in str(raised.value)


def test_the_cli_says_a_bad_file_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, f'[domains.a]\nqueue = "rq"\nurl = "{SECRET}"\n')
    dsn = "postgresql://nobody@127.0.0.1:1/none"

    assert main(["retry", "b", "j", "--actions", str(path), "--dsn", dsn]) == 2

    err = capsys.readouterr().err
    assert err == "otel-jobsteps: error: the actions file has no [domains.b] table\n"
