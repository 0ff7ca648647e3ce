"""serve's operator role against a real RQ worker: the API and the page's forms, their refusals
(no operator token 404, read token 403, none 401, no CSRF 403), the audit row on the page and
the counter on /metrics."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("rq", reason="needs the rq extra")

from rq import Queue
from starlette.testclient import TestClient

from otel_jobsteps.cli import main
from otel_jobsteps.web import create_app
from otel_jobsteps.web.actions import OPERATOR_TOKEN_ENV
from otel_jobsteps.web.security import TOKEN_COOKIE
from tests.actions.support import (
    AS_OPERATOR,
    AS_READER,
    OPERATOR,
    READ,
    action_rows,
    actions_file,
)
from tests.queues.support import WorkerProcess, log_rows, wait_for_log
from tests.queues.test_rq import DOMAIN, enqueue


def failed_job(queue: Queue, dsn: str) -> str:
    job_id = enqueue(queue, "flaky")  # no retries: attempt 1 fails for good
    wait_for_log(dsn, DOMAIN, job_id, 1)
    return job_id


def test_without_an_operator_token_action_routes_are_404_and_the_page_has_no_buttons(
    module_dsn: str,
) -> None:
    with TestClient(create_app(module_dsn)) as client:
        assert client.post(f"/api/jobs/{DOMAIN}/j/retry").status_code == 404
        assert client.post("/job/retry").status_code == 404


def test_only_the_operator_token_acts(client: TestClient) -> None:
    url = f"/api/jobs/{DOMAIN}/some-job/retry"
    assert client.post(url).status_code == 401
    assert client.post(url, headers={"authorization": "Bearer wrong-but-long-enough"}).json() == {
        "error": "authentication required"
    }
    refused = client.post(url, headers=AS_READER)
    assert (refused.status_code, refused.json()) == (
        403,
        {"error": "this token may read, not act (the operator token may)"},
    )
    other = client.post("/api/jobs/elsewhere/some-job/retry", headers=AS_OPERATOR)
    assert other.status_code == 404
    assert (
        other.json()["error"]
        == "no actions for domain 'elsewhere': the actions file does not name it"
    )


def test_api_retry_runs_attempt_2_once_per_key_and_is_counted(
    worker: WorkerProcess, queue: Queue, module_dsn: str, client: TestClient
) -> None:
    job_id = failed_job(queue, module_dsn)
    url = f"/api/jobs/{DOMAIN}/{job_id}/retry"
    headers = {**AS_OPERATOR, "idempotency-key": "click-1"}

    first = client.post(url, headers=headers)
    second = client.post(url, headers=headers)

    assert first.status_code == second.status_code == 202
    assert second.json() == {**first.json(), "repeated": True}
    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
    [(_, detail, _)] = action_rows(module_dsn, DOMAIN, job_id)
    assert (detail["actor"], detail["idempotency_key"]) == ("operator via api", "click-1")
    metrics = client.get("/metrics", headers=AS_READER).text
    assert 'otel_jobsteps_actions_total{action="retry",outcome="done"} 1.0' in metrics
    gone = client.post(f"/api/jobs/{DOMAIN}/{job_id}-never/cancel", headers=AS_OPERATOR)
    assert (gone.status_code, gone.json()["error"]) == (404, f"RQ has no job {job_id}-never")


def test_page_forms_need_the_operator_session_and_its_csrf_token(
    worker: WorkerProcess, queue: Queue, module_dsn: str, client: TestClient
) -> None:
    job_id = failed_job(queue, module_dsn)
    page_url = f"/jobs/{DOMAIN}/{job_id}"
    assert "<form" not in client.get(page_url, headers=AS_READER).text  # a reader: no buttons
    assert client.post("/job/retry", headers=AS_READER).status_code == 403  # nor acts

    client.get(page_url, params={"token": OPERATOR})  # the operator's session cookie
    assert client.cookies.get(TOKEN_COOKIE) == OPERATOR
    html = client.get(page_url).text
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', html.split('action="/job/retry"')[1]))
    form = {name: fields[name] for name in ("domain", "job_id", "csrf", "idempotency_key")}
    assert client.post("/job/retry", data={**form, "csrf": "forged"}).status_code == 403

    done = client.post("/job/retry", data=form, follow_redirects=False)
    again = client.post("/job/retry", data=form, follow_redirects=False)  # a double click

    assert (done.status_code, done.headers["location"]) == (303, page_url)
    assert again.status_code == 303
    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    [(_, detail, message)] = action_rows(module_dsn, DOMAIN, job_id)
    assert detail["actor"] == "operator via page"
    assert message in client.get(page_url).text  # in the events, as any ordinary event


def test_serve_refuses_half_an_operator_setup_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(OPERATOR_TOKEN_ENV, raising=False)
    dsn = "postgresql://127.0.0.1:1/none"
    assert main(["serve", "--dsn", dsn, "--operator-token", OPERATOR]) == 2
    monkeypatch.setenv(OPERATOR_TOKEN_ENV, "short")
    assert main(["serve", "--dsn", dsn, "--actions", str(tmp_path / "a.toml")]) == 2
    first, second = capsys.readouterr().err.splitlines()
    assert first.endswith(f"--actions and --operator-token (or {OPERATOR_TOKEN_ENV}) go together")
    assert f"{OPERATOR_TOKEN_ENV} is too short" in second


def test_an_operator_token_that_is_not_utf8_is_bad_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An environment variable's undecodable bytes reach Python as lone surrogates: one line
    and exit 2, as for the read token (not a traceback where the tokens are compared)."""
    monkeypatch.setenv(OPERATOR_TOKEN_ENV, os.fsdecode(b"\xff" * 20))
    path = actions_file(tmp_path, DOMAIN, "rq", url="redis://127.0.0.1:1")
    dsn = "postgresql://127.0.0.1:1/none"
    assert main(["serve", "--dsn", dsn, "--token", READ, "--actions", str(path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith(f"{OPERATOR_TOKEN_ENV} is not valid UTF-8")


def test_action_routes_answer_bad_input_as_every_route_does(client: TestClient) -> None:
    """The guard the pages have: a NUL in the path or the query is 400 before anything acts."""
    job = client.post(f"/api/jobs/{DOMAIN}/some-job/retry?force=%00", headers=AS_OPERATOR)
    state = client.get("/api/actions/a%00b", headers=AS_OPERATOR)
    assert (job.status_code, job.json()) == (
        400,
        {"error": "'force' must not contain a NUL character"},
    )
    assert (state.status_code, state.json()) == (
        400,
        {"error": "'bulk_id' must not contain a NUL character"},
    )


def test_a_job_id_with_slashes_is_acted_on_whole(client: TestClient) -> None:
    gone = client.post(f"/api/jobs/{DOMAIN}/a/b%2Fc/cancel", headers=AS_OPERATOR)
    assert (gone.status_code, gone.json()["error"]) == (
        404,
        "RQ has no job a/b/c (not an id RQ takes)",
    )
