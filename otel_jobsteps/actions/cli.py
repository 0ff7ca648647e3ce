"""``otel-jobsteps retry|cancel DOMAIN JOB_ID --actions FILE``: one action from the terminal.

Exit 0 when the queue did it, 1 when the queue refused or no longer knows the job, 2 on bad
input (the main parser's rule). The actor is ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from typing import Any

from ..errors import printable
from .config import load_actions
from .runner import ACTIONS, ActionResult, run_action

__all__ = ["add_commands", "add_operator_options", "cli_actor"]

EXIT_REFUSED = 1
CommandFactory = Callable[[str, Callable[[argparse.Namespace], int], str], Any]
ArgumentReader = Callable[[argparse.Namespace], str]


def cli_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = "unknown"
    return f"cli:{user}"


def add_commands(command: CommandFactory, dsn: ArgumentReader, schema: ArgumentReader) -> None:
    """Add ``retry`` and ``cancel`` to the parser ``command`` adds subcommands to."""
    texts = {
        "retry": "put a failed job back on its queue (its worker runs the next attempt)",
        "cancel": "cancel a waiting job through its queue (with --force: stop a running one)",
    }
    for action in ACTIONS:

        def handle(args: argparse.Namespace, action: str = action) -> int:
            result = run_action(
                dsn(args),
                load_actions(args.actions),
                action,  # type: ignore[arg-type]
                args.domain,
                args.job_id,
                actor=cli_actor(),
                force=args.force,
                idempotency_key=args.idempotency_key,
                schema=schema(args),
            )
            _report(args, result)
            return 0 if result.outcome == "done" else EXIT_REFUSED

        sub = command(action, handle, texts[action] + "; audited as an ACTION row")
        sub.add_argument("domain")
        sub.add_argument("job_id")
        sub.add_argument(
            "--actions", required=True, metavar="FILE", help="where each domain's jobs live (TOML)"
        )
        sub.add_argument(
            "--force", action="store_true", help="act even when the latest attempt is running"
        )
        sub.add_argument(
            "--idempotency-key", metavar="KEY", help="a key used before answers its action again"
        )
        sub.add_argument("--json", action="store_true", help="print the result as JSON")


def add_operator_options(serve: argparse.ArgumentParser) -> None:
    """``serve``'s opt-in operator role (docs/web.md, "Actions")."""
    serve.add_argument(
        "--operator-token",
        help="turns on retry and cancel for requests bearing it, at least 16 characters, not "
        "the --token (default: $OTEL_JOBSTEPS_OPERATOR_TOKEN)",
    )
    serve.add_argument(
        "--actions", metavar="FILE", help="with --operator-token: where each domain's jobs live"
    )


def _report(args: argparse.Namespace, result: ActionResult) -> None:
    if args.json:
        print(json.dumps(result.to_dict()))
        return
    where = f"{printable(args.domain)} / {printable(args.job_id)}"
    row = "" if result.action_id is None else f" (action {result.action_id})"
    again = " (repeated: the key named an earlier action)" if result.repeated else ""
    line = f"{result.action} {where}: {result.outcome}, {printable(result.answer)}{row}{again}"
    print(line, file=sys.stdout if result.outcome == "done" else sys.stderr)
