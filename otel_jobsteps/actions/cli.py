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

from .._cli.arguments import dsn_option, schema_option
from ..errors import ConfigurationError, printable
from .bulk import FILTER_KEYS, SHOWN_IDS, BulkPlan, parse_filter, plan_bulk, run_bulk, summary
from .config import load_actions
from .runner import ACTIONS, ActionResult, run_action

__all__ = ["add_commands", "add_operator_options", "cli_actor"]

EXIT_REFUSED = 1
CommandFactory = Callable[[str, Callable[[argparse.Namespace], int], str], Any]


def cli_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = "unknown"
    return f"cli:{user}"


def add_commands(command: CommandFactory) -> None:
    """Add ``retry`` and ``cancel`` to the parser ``command`` adds subcommands to."""
    texts = {
        "retry": "put a failed job back on its queue (its worker runs the next attempt)",
        "cancel": "cancel a waiting job through its queue (with --force: stop a running one)",
    }
    for action in ACTIONS:

        def handle(args: argparse.Namespace, action: str = action) -> int:
            if args.filter:
                return _bulk(args, action, dsn_option(args), schema_option(args))
            if args.domain is None or args.job_id is None or args.dry_run or args.max:
                raise ConfigurationError(
                    "name a job (DOMAIN JOB_ID) or jobs (--filter ... --max N [--dry-run])"
                )
            result = run_action(
                dsn_option(args),
                load_actions(args.actions),
                action,  # type: ignore[arg-type]
                args.domain,
                args.job_id,
                actor=cli_actor(),
                force=args.force,
                idempotency_key=args.idempotency_key,
                schema=schema_option(args),
            )
            _report(args, result)
            return 0 if result.outcome == "done" else EXIT_REFUSED

        sub = command(action, handle, texts[action] + "; audited as an ACTION row")
        sub.add_argument("domain", nargs="?")
        sub.add_argument("job_id", nargs="?")
        sub.add_argument(
            "--actions", required=True, metavar="FILE", help="where each domain's jobs live (TOML)"
        )
        sub.add_argument(
            "--force", action="store_true", help="act even when the latest attempt is running"
        )
        sub.add_argument(
            "--idempotency-key", metavar="KEY", help="a key used before answers its action again"
        )
        sub.add_argument(
            "--filter",
            action="append",
            metavar="KEY=VALUE",
            help=f"bulk: the jobs list's filter, keys {', '.join(FILTER_KEYS)} (repeatable)",
        )
        sub.add_argument("--max", type=int, metavar="N", help="bulk: refuse more than N jobs")
        sub.add_argument("--dry-run", action="store_true", help="bulk: count, act on none")
        sub.add_argument("--json", action="store_true", help="print the result as JSON")


def _bulk(args: argparse.Namespace, action: str, dsn: str, schema: str) -> int:
    if args.domain is not None:
        raise ConfigurationError("--filter goes without DOMAIN JOB_ID")
    pairs: dict[str, str] = {}
    for text in args.filter:
        key, sep, value = text.partition("=")
        if not sep:
            raise ConfigurationError(f"a filter is KEY=VALUE, got {printable(text)!r}")
        pairs[key] = value
    config = load_actions(args.actions)
    plan = plan_bulk(dsn, parse_filter(pairs), args.max, schema=schema)
    if args.dry_run:
        _print_plan(args, plan)
        return 0

    def progress(results: list[ActionResult]) -> None:
        print(f"{action}: {len(results)}/{len(plan.jobs)}", file=sys.stderr, flush=True)

    results = run_bulk(
        dsn,
        config,
        action,  # type: ignore[arg-type]
        plan,
        actor=cli_actor(),
        force=args.force,
        idempotency_key=args.idempotency_key,
        schema=schema,
        progress=progress,
    )
    counted = summary(results)
    if args.json:
        print(json.dumps({"action": action, "matched": len(plan.jobs), **counted}))
    else:
        parts = [f"{number} {outcome.replace('_', ' ')}" for outcome, number in counted.items()]
        print(f"{action}: {', '.join(parts)}")
    return 0 if counted["done"] == len(results) else EXIT_REFUSED


def _print_plan(args: argparse.Namespace, plan: BulkPlan) -> None:
    if args.json:
        print(json.dumps(plan.to_dict()))
        return
    count = f"more than {plan.max}" if plan.over else str(len(plan.jobs))
    print(f"{count} jobs match (max {plan.max})")
    for domain, job_id in plan.jobs[:SHOWN_IDS]:
        print(f"  {printable(domain)} / {printable(job_id)}")


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
