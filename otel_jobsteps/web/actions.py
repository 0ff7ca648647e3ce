"""Operator actions in ``serve`` (opt-in: ``--operator-token`` with ``--actions FILE``).

``POST /api/jobs/{domain}/{job_id}/retry|cancel`` with ``Authorization: Bearer <operator token>``
answers 202 ``{"action_id": ...}`` (409 refused, 404 unknown to the queue, one-line reason);
``Idempotency-Key`` is honoured. The job page's forms post to ``/job/retry|cancel`` from an
operator session (the token cookie holding the operator token) with a CSRF token, an HMAC of
that cookie under a secret of this process. The read token is 403, no token 401; wrong tokens
were refused and slowed before this (`security.TokenMiddleware`). Without an operator token
none of these routes exists (404) and the page shows no buttons.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..actions import ACTIONS, ActionResult, ActionsConfig, load_actions, run_action
from ..actions.bulk import parse_filter, plan_bulk, run_bulk
from ..errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError
from .action_runs import ActionCounter, BulkRuns
from .auth import check_token, same_token
from .endpoints import AsyncEndpoint, JobRoute, guarded_async
from .pages import Pages
from .rendering import job_url, json_response
from .security import TOKEN_COOKIE, bearer_token

__all__ = [
    "OPERATOR_TOKEN_ENV",
    "Operator",
    "action_routes",
    "operator_from_options",
]

OPERATOR_TOKEN_ENV = "OTEL_JOBSTEPS_OPERATOR_TOKEN"
MAX_KEY_LENGTH = 200
MAX_FORM_BYTES = 65536
_STATUS = {"done": 202, "refused": 409, "not_found": 404}


@dataclass
class Operator:
    """The operator role of one server: its token, where jobs live, and what it did."""

    token: str = field(repr=False)
    config: ActionsConfig
    dsn: str
    schema: str = "public"
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    counter: ActionCounter = field(default_factory=lambda: ActionCounter())
    bulks: BulkRuns = field(default_factory=lambda: BulkRuns())

    def csrf(self, session: str) -> str:
        """The CSRF token of a session: an HMAC of its cookie, so it is good for that one only."""
        return hmac.new(self.secret, b"csrf\x00" + session.encode(), hashlib.sha256).hexdigest()

    def session(self, request: Request) -> str | None:
        """The request's token cookie when it holds the operator token (an operator session)."""
        cookie = request.cookies.get(TOKEN_COOKIE)
        return cookie if cookie and same_token(cookie, self.token) else None

    def form(self, request: Request, domain: str, job_id: str) -> dict[str, str] | None:
        """What the job page's action forms carry, for an operator session on a domain with
        actions; None: no buttons."""
        session = self.session(request)
        if session is None or domain not in self.config.domains:
            return None
        return {
            "domain": domain,
            "job_id": job_id,
            "csrf": self.csrf(session),
            "idempotency_key": secrets.token_urlsafe(16),  # one per rendered form
        }

    def act(
        self, action: str, domain: str, job_id: str, actor: str, force: bool, key: str | None
    ) -> ActionResult:
        result = run_action(
            self.dsn,
            self.config,
            action,  # type: ignore[arg-type]
            domain,
            job_id,
            actor=actor,
            force=force,
            idempotency_key=key,
            schema=self.schema,
        )
        if not result.repeated:
            self.counter.add(result.action, result.outcome)
        return result

    def bulk(
        self, action: str, body: dict[str, Any], actor: str, key: str | None
    ) -> tuple[int, dict[str, Any]]:
        """A bulk action's answer: the dry run's plan (200), or the run started in a thread of
        its own (202, its progress at ``/api/actions/<id>``)."""
        if action not in ACTIONS:
            raise _Answer(404, f"no action {action!r} (retry or cancel)")
        options = {name: body.pop(name, None) for name in ("dry_run", "max", "force")}
        try:
            plan = plan_bulk(self.dsn, parse_filter(body), options["max"], schema=self.schema)
        except ConfigurationError as error:
            raise _Answer(400, str(error)) from None
        except (DatabaseUnavailableError, SchemaNotMigratedError) as error:
            raise _Answer(503, str(error)) from None
        if options["dry_run"] is True:
            return 200, plan.to_dict()
        if plan.over:
            raise _Answer(409, f"more than max ({plan.max}) jobs match: narrow the filter")
        run = self.bulks.start(action, len(plan.jobs))

        def work(stop: threading.Event) -> list[ActionResult]:
            return run_bulk(
                self.dsn,
                self.config,
                action,
                plan,
                actor=actor,
                force=options["force"] is True,
                idempotency_key=key,
                schema=self.schema,
                progress=run.advance,
                stop=stop,
            )

        run.begin(work, self.counter)
        return 202, run.to_dict()


def operator_from_options(
    token: str | None,
    actions_file: str | None,
    dsn: str,
    schema: str,
    read_token: str | None = None,
) -> Operator | None:
    """``serve``'s operator role from ``--operator-token`` (else `OPERATOR_TOKEN_ENV`) and
    ``--actions``: both or neither; the token follows the read token's rules and differs from it."""
    name = "--operator-token" if token is not None else OPERATOR_TOKEN_ENV
    token = token if token is not None else os.environ.get(OPERATOR_TOKEN_ENV)
    if token is None and actions_file is None:
        return None
    if token is None or actions_file is None:
        raise ConfigurationError(
            f"--actions and --operator-token (or {OPERATOR_TOKEN_ENV}) go together"
        )
    check_token(token, name)
    if read_token is not None and same_token(token, read_token):
        raise ConfigurationError(f"{name} must differ from the read token (a reader could act)")
    return Operator(token, load_actions(actions_file), dsn, schema)


def action_routes(operator: Operator | None, pages: Pages) -> list[BaseRoute]:
    """The API routes and the page's form routes (POST only); without an operator they answer
    404, as paths that do not exist (not 405 from the job's GET route)."""
    if operator is None:

        async def absent(request: Request) -> Response:
            return json_response({"error": "not found"}, 404)

        return [
            *(_job_action(action, absent) for action in ACTIONS),
            Route("/api/actions/{action:str}", absent, methods=["POST"]),
        ]

    def on_job(action: str) -> AsyncEndpoint:
        async def act(request: Request) -> Response:
            domain, job_id = request.path_params["domain"], request.path_params["job_id"]
            refused = _role_refusal(request, operator, api=True)
            if refused is not None:
                return refused
            key = request.headers.get("idempotency-key")
            force = request.query_params.get("force") in ("1", "true")
            try:
                _check_key(key)
                result = await _run(
                    operator, action, domain, job_id, "operator via api", force, key
                )
            except _Answer as answer:
                return json_response({"error": answer.message}, answer.status)
            body: dict[str, Any] = result.to_dict()
            if result.outcome != "done":
                body["error"] = result.answer
            return json_response(body, _STATUS[result.outcome])

        return act

    async def page(request: Request) -> Response:
        action = request.path_params["action"]
        session = operator.session(request)
        if session is None:
            refused = _role_refusal(request, operator, api=False)
            return refused or _error_page(pages, 403, "only an operator session may act")
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return _error_page(pages, 413, f"a form is at most {MAX_FORM_BYTES} bytes")
        fields = dict(parse_qsl(body.decode("utf-8", "replace")))
        if not same_token(fields.get("csrf", ""), operator.csrf(session)):
            return _error_page(pages, 403, "missing or wrong CSRF token: reload the job page")
        domain, job_id = fields.get("domain", ""), fields.get("job_id", "")
        key = fields.get("idempotency_key") or None
        try:
            _check_key(key)
            force = fields.get("force") == "1"
            result = await _run(operator, action, domain, job_id, "operator via page", force, key)
        except _Answer as answer:
            return _error_page(pages, answer.status, answer.message)
        if result.outcome != "done":
            return _error_page(pages, _STATUS[result.outcome], result.answer)
        return RedirectResponse(job_url(domain, job_id), 303)

    async def bulk(request: Request) -> Response:
        refused = _role_refusal(request, operator, api=True)
        if refused is not None:
            return refused
        try:
            body = await _json_body(request)
            key = request.headers.get("idempotency-key")
            _check_key(key)
            status, answer = await run_in_threadpool(
                operator.bulk, request.path_params["action"], body, "operator via api (bulk)", key
            )
        except _Answer as error:
            return json_response({"error": error.message}, error.status)
        return json_response(answer, status)

    async def bulk_state(request: Request) -> Response:
        refused = _role_refusal(request, operator, api=True)
        if refused is not None:
            return refused
        run = operator.bulks.get(request.path_params["bulk_id"])
        if run is None:
            return json_response({"error": "no such bulk action in this server"}, 404)
        if request.method == "POST":  # .../stop
            run.stop.set()
            return json_response(run.to_dict(), 202)
        return json_response(run.to_dict(), 200)

    return [
        *(
            _job_action(action, guarded_async(pages, on_job(action), api=True))
            for action in ACTIONS
        ),
        Route("/api/actions/{action:str}", guarded_async(pages, bulk, api=True), methods=["POST"]),
        Route(
            "/api/actions/{bulk_id:str}",
            guarded_async(pages, bulk_state, api=True),
            methods=["GET"],
        ),
        Route(
            "/api/actions/{bulk_id:str}/stop",
            guarded_async(pages, bulk_state, api=True),
            methods=["POST"],
        ),
        Route("/job/{action:str}", guarded_async(pages, page, api=False), methods=["POST"]),
    ]


def _job_action(action: str, endpoint: AsyncEndpoint) -> JobRoute:
    """``POST /api/jobs/{domain}/{job_id}/<action>``: the job id is everything between the
    domain and the action (a ``%2F`` stays in its segment)."""
    return JobRoute(f"/api/jobs/{{domain}}/{{job_id}}/{action}", endpoint, methods=["POST"])


async def _json_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise _Answer(413, f"a body is at most {MAX_FORM_BYTES} bytes")
    try:
        found = json.loads(body or b"{}")
    except ValueError:
        raise _Answer(400, "the body is not JSON") from None
    if not isinstance(found, dict):
        raise _Answer(400, "the body is a JSON object: the filter, dry_run, max, force")
    return found


class _Answer(Exception):
    """A request refused before the queue was asked: its status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


async def _run(
    operator: Operator,
    action: str,
    domain: str,
    job_id: str,
    actor: str,
    force: bool,
    key: str | None,
) -> ActionResult:
    """Check the request's names, then act in a worker thread (the queue clients block)."""
    if action not in ACTIONS:
        raise _Answer(404, f"no action {action!r} (retry or cancel)")
    if "\x00" in domain + job_id or not domain or not job_id:
        raise _Answer(400, "a domain and a job id are required, without NUL characters")
    if domain not in operator.config.domains:
        raise _Answer(404, f"no actions for domain {domain!r}: the actions file does not name it")
    try:
        return await run_in_threadpool(operator.act, action, domain, job_id, actor, force, key)
    except ConfigurationError as error:
        raise _Answer(400, str(error)) from None
    except (DatabaseUnavailableError, SchemaNotMigratedError) as error:
        raise _Answer(503, str(error)) from None


def _check_key(key: str | None) -> None:
    if key is not None and (len(key) > MAX_KEY_LENGTH or not key.isprintable() or not key):
        raise _Answer(400, f"an idempotency key is 1 to {MAX_KEY_LENGTH} printable characters")


def _role_refusal(request: Request, operator: Operator, *, api: bool) -> Response | None:
    """None for the operator's bearer; 403 for a reader (the token layer let its credentials
    through), 401 for a request with none. A cookie alone never acts through the API: a
    browser sends it by itself, so page actions go through the CSRF-checked forms."""
    bearer = bearer_token(request)
    if bearer is not None and same_token(bearer, operator.token):
        return None
    if bearer or request.cookies.get(TOKEN_COOKIE):
        message, status = "this token may read, not act (the operator token may)", 403
    else:
        message, status = "the operator token is required", 401
    if api:
        return json_response({"error": message}, status)
    return Response(message, status, media_type="text/plain")


def _error_page(pages: Pages, status: int, message: str) -> Response:
    return pages.render("error.html", status, status=status, message=message)
