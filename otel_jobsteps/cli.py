"""``otel-jobsteps``: migrate, show, jobs, steps, tail, sweep, prune, demo, serve, collect, ops.

Exit codes: 0 done, 1 the job asked for does not exist, 2 bad input or the database is
unreachable or not migrated (one line on stderr, never a traceback, never a password), 130
interrupted (``tail`` stops on Ctrl-C with 0).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, NoReturn, TypeVar

import psycopg

from . import __version__
from ._cli.arguments import (
    dsn_option,
    duration_argument,
    factor_argument,
    int_between,
    is_utf8,
    parse_duration,
    print_json,
    schema_option,
    seconds_between,
)
from ._cli.extras import install_hint
from ._cli.formatting import format_difference, format_duration, format_time
from ._cli.timeline import Style, render_detail, render_jobs, render_log_line
from ._core.dialects import DEFAULT_DIALECTS, select_dialects
from ._core.vocabulary import MAX_ATTEMPT
from ._pg.db import Record, borrowed_connection, session
from ._pg.step_stats import (
    RetryTax,
    StepStat,
    StepVersion,
    parse_thresholds,
    read_retry_tax,
    read_step_stats,
    read_step_versions,
)
from .actions.cli import add_commands as add_action_commands
from .actions.cli import add_operator_options
from .errors import ConfigurationError, JobStepsError, describe, printable
from .maintenance import prune, sweep
from .query import (
    STATUSES,
    ActivityFollower,
    AttemptDiff,
    JobActivity,
    LogLine,
    attempt_diff,
    job_detail,
    list_jobs,
    parse_tag,
    window_start,
)
from .schema import migrate

__all__ = ["activity_line", "main", "parse_duration"]

PROG = "otel-jobsteps"
_Found = TypeVar("_Found", bound=Record)
DIALECTS_ENV = "OTEL_JOBSTEPS_DIALECTS"
EXIT_NOT_FOUND = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
MIN_INTERVAL_S = 0.05  # tail polls the database this often at most
MAX_INTERVAL_S = 3600.0
MAX_LIMIT = 1_000_000
MAX_BATCH_SIZE = 100_000
FORWARDED_ENV = "OTEL_JOBSTEPS_FORWARDED_ALLOW_IPS"


def _tag_argument(text: str) -> tuple[str, str]:
    try:
        return parse_tag(text)
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


# -- commands --------------------------------------------------------------------------------


def _migrate(args: argparse.Namespace) -> int:
    schema = schema_option(args)
    if args.interval is not None and not args.partitioned:
        raise ConfigurationError("--interval goes with --partitioned")
    interval = (args.interval or timedelta(days=1)) if args.partitioned else None
    applied = migrate(dsn_option(args), schema=schema, partition_interval=interval)
    if applied:
        versions = ", ".join(f"{version:04d}" for version in applied)
        print(f"schema {schema!r}: applied migration {versions}")
    else:
        print(f"schema {schema!r}: already up to date")
    if interval is not None:
        print(
            f"schema {schema!r}: partitioned layout, one interval per {format_duration(interval)}"
            " (prune moves finished attempts into their interval and drops old intervals whole)"
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    if args.diff is not None:
        a, b = args.diff
        diff = attempt_diff(
            dsn_option(args, read=True), args.domain, args.job_id, a, b, schema=schema_option(args)
        )
        return _print_found(args, diff, f"attempt {a} or {b} of job", _diff_text)
    detail = job_detail(
        dsn_option(args, read=True),
        args.domain,
        args.job_id,
        args.attempt,
        schema=schema_option(args),
        before_attempt=args.before_attempt,
    )
    which = f"attempt {args.attempt} of job" if args.attempt is not None else "job"
    style = Style.for_stream(sys.stdout)
    return _print_found(args, detail, which, partial(render_detail, style=style, logs=args.logs))


def _print_found(
    args: argparse.Namespace, found: _Found | None, which: str, text: Callable[[_Found], str]
) -> int:
    """``show``'s answer: ``found`` as JSON or ``text(found)``, or the line saying ``which`` of the
    job asked for has no rows."""
    if found is None:
        where = f"{printable(args.domain)} / {printable(args.job_id)}"
        print(f"{PROG}: no {which} {where}", file=sys.stderr)
        return EXIT_NOT_FOUND
    if args.json:
        print_json(found.to_dict())
    else:
        print(text(found))
    return 0


def _diff_text(diff: AttemptDiff) -> str:
    """The aligned steps of two attempts, the first divergence starred, then each attempt's
    outcome, error, tags and resource; every text from job data made printable."""
    a, b = diff.a, diff.b
    index = diff.divergence_index
    lines = [
        f"{printable(diff.domain)} / {printable(diff.job_id)}:"
        f" attempt {a.attempt} {a.status} vs attempt {b.attempt} {b.status}",
        "first divergence: "
        + (
            "none"
            if index is None
            else _run_name(diff.steps[index].key, diff.steps[index].occurrence)
        ),
        "",
    ]
    header = ("STEP", f"ATTEMPT {a.attempt}", "TOOK", f"ATTEMPT {b.attempt}", "TOOK", "DIFFERENCE")
    lines.append(_table(header, [
        (_run_name(p.key, p.occurrence) + (" *" if i == index else ""), p.a_status or "-",
         format_duration(p.a_duration), p.b_status or "-", format_duration(p.b_duration),
         format_difference(p.difference))
        for i, p in enumerate(diff.steps)
    ]))  # fmt: skip
    for side in (a, b):
        facts = [f"attempt {side.attempt}: {side.status}"]
        facts += [f"reason {printable(side.reason)}"] if side.reason else []
        facts += [f"error {printable(side.error)}"] if side.error else []
        if side.failed_step:
            message = f": {printable(side.failed_message)}" if side.failed_message else ""
            facts.append(f"failed step {printable(side.failed_step)}{message}")
        for name, pairs in (("tags", side.tags), ("resource", side.resource)):
            listed = ", ".join(f"{printable(k)}={printable(v)}" for k, v in pairs.items())
            facts += [f"{name} {listed}"] if listed else []
        lines.append("  ".join(facts))
    return "\n".join(lines)


def _run_name(key: str, occurrence: int) -> str:
    """A step key as printed, with its run number from the second run on."""
    return printable(key) + (f" (run {occurrence})" if occurrence > 1 else "")


def _jobs(args: argparse.Namespace) -> int:
    jobs = list_jobs(
        dsn_option(args, read=True),
        domain=args.domain,
        job_type=args.type,
        status=args.status,
        since=args.since,
        limit=args.limit,
        schema=schema_option(args),
        tag=args.tag,
    )
    if args.json:
        print_json([job.to_dict() for job in jobs])
    else:
        print(render_jobs(jobs, Style.for_stream(sys.stdout)))
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, the header first."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [[f"{cell:<{width}}" for cell, width in zip(row, widths, strict=True)]
             for row in (header, *rows)]  # fmt: skip
    return "\n".join("  ".join(cells).rstrip() for cells in lines)


def _seconds(value: float | None) -> str:
    return format_duration(None if value is None else timedelta(seconds=value))


def _steps(args: argparse.Namespace) -> int:
    schema = schema_option(args)
    thresholds = parse_thresholds(args.p95_factor, args.failure_points, args.min_samples)
    if args.retry_tax and args.by_version:
        raise ConfigurationError("--retry-tax and --by-version are two tables: pick one")
    with session(dsn_option(args, read=True), schema=schema, snapshot=True) as conn:
        since_at = window_start(conn, args.since)
        if args.retry_tax:
            tax = read_retry_tax(conn, schema, since_at)
            found: Sequence[Record] = tax
            table = partial(_retry_tax_table, tax)
        elif args.by_version:
            versions = read_step_versions(conn, schema, since_at, thresholds)
            found, table = versions, partial(_versions_table, versions)
        else:
            stats = read_step_stats(conn, schema, since_at)
            found, table = stats, partial(_step_table, stats)
    if args.json:
        print_json([row.to_dict() for row in found])
    elif not found:
        what = "failed attempts" if args.retry_tax else "steps closed"
        what += " of attempts with a service.version" if args.by_version else ""
        print(f"no {what} in the last {format_duration(args.since)}")
    else:
        print(table())
    return 0


def _step_table(stats: Sequence[StepStat]) -> str:
    header = ("JOB TYPE", "STEP", "COUNT", "FAILED", "P50", "P95", "MAX", "LAST ENDED")
    return _table(header, [
        (printable(s.job_type or "-"), printable(s.step_key), str(s.steps), str(s.failed),
         _seconds(s.p50_seconds), _seconds(s.p95_seconds), _seconds(s.max_seconds),
         format_time(s.last_ended_at))
        for s in stats
    ])  # fmt: skip


def _versions_table(versions: Sequence[StepVersion]) -> str:
    """Per job type and step, its releases in order of appearance, a regressed one marked."""
    header = ("JOB TYPE", "STEP", "RELEASE", "COUNT", "FAILED", "FAILURE %", "P95", "AGAINST",
              "REGRESSION")  # fmt: skip
    return _table(header, [
        (printable(v.job_type or "-"), printable(v.step_key), printable(v.service_version),
         str(v.steps), str(v.failed), f"{100 * v.failure_ratio:.1f}", _seconds(v.p95_seconds),
         "-" if v.previous_version is None else printable(v.previous_version),
         _regression(v))
        for v in versions
    ])  # fmt: skip


def _regression(version: StepVersion) -> str:
    marks = ["p95"] * version.p95_regressed + ["failures"] * version.failure_regressed
    return "REGRESSED: " + ", ".join(marks) if marks else "-"


def _retry_tax_table(tax: Sequence[RetryTax]) -> str:
    header = ("JOB TYPE", "STEP", "FAILED ATTEMPTS", "TIME IN FAILED", "TO SUCCESS P50", "P95")
    return _table(header, [
        (printable(t.job_type or "-"), printable(t.step_key), str(t.failed_attempts),
         _seconds(t.failed_seconds), _seconds(t.to_success_p50_seconds),
         _seconds(t.to_success_p95_seconds))
        for t in tax
    ])  # fmt: skip


def activity_line(activity: JobActivity, style: Style) -> str:
    """One line of ``tail``: a follower's change, every text from job data made printable."""
    where = f"{printable(activity.domain)} / {printable(activity.job_id)} #{activity.attempt}"
    key = printable(activity.step_key or "")
    if activity.change == "log":
        line = LogLine.from_row(
            {name: getattr(activity, name) for name in ("attempt", "step_key", "message")},
            time=activity.at,
            detail=activity.detail,
        )
        return render_log_line(line, style, where)
    if activity.change == "event":
        what = f"{printable(activity.type)} {printable(activity.message or '')}"
    elif activity.change == "started":
        what = f"{key} started"
    else:
        status = activity.step_status or ""
        what = f"{key} {style.status(status, status)}"
        if activity.message:
            what += f": {printable(activity.message)}"
    return f"{format_time(activity.at)}  {where}  {what}".rstrip()


def _tail(args: argparse.Namespace) -> int:
    style = Style.for_stream(sys.stdout)
    scope = f" of domain {args.domain!r}" if args.domain else ""
    try:
        with borrowed_connection(dsn_option(args, read=True)) as conn:
            follower = ActivityFollower(conn, domain=args.domain, schema=schema_option(args))
            print(
                f"following job_event{scope} every {args.interval:g}s "
                f"({_plural(follower.open_steps, 'open step')}); Ctrl-C to stop",
                flush=True,
            )
            while True:
                for activity in follower.poll():
                    print(activity_line(activity, style), flush=True)
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _sweep(args: argparse.Namespace) -> int:
    swept = sweep(
        dsn_option(args), args.older_than, dry_run=args.dry_run, schema=schema_option(args)
    )
    silence = format_duration(args.older_than)
    if not swept:
        print(f"no open step has been silent for {silence}")
        return 0
    verb = "would close" if args.dry_run else "closed"
    print(f"{verb} {_plural(len(swept), 'step')} silent for {silence} as FAILED abandoned:")
    for s in swept:
        settles = "  + job_log FAILED abandoned" if s.writes_job_log else ""
        where = f"{printable(s.domain)} / {printable(s.job_id)} #{s.attempt}"
        print(
            f"  {where}  {printable(s.step_key)}  "
            f"started {format_time(s.started_at)}  last seen {format_time(s.last_seen_at)}"
            f"{settles}"
        )
    return 0


def _prune(args: argparse.Namespace) -> int:
    result = prune(
        dsn_option(args),
        args.older_than,
        dry_run=args.dry_run,
        batch_size=args.batch_size,
        schema=schema_option(args),
    )
    logs = _plural(result.job_logs, "job_log row")
    events = _plural(result.job_events, "job_event row")
    what = f"{logs} and {events} of attempts finished over {format_duration(args.older_than)} ago"
    if args.dry_run:
        print(f"would delete {what}")
    else:
        dropped = (
            f" and {_plural(result.partitions, 'dropped interval')}" if result.partitions else ""
        )
        print(f"deleted {what} in {_plural(result.batches, 'batch', 'batches')}{dropped}")
        if result.settled_attempts:
            print(f"forgot {_plural(result.settled_attempts, 'settled OTLP attempt')}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ._cli.demo import run_demo  # the SDK and the embedded server load only for the demo

    dsn = dsn_option(args) if args.dsn or os.environ.get("OTEL_JOBSTEPS_DSN") else None
    consent = (lambda _: True) if args.migrate else _ask if sys.stdin.isatty() else None
    run_demo(dsn, schema=schema_option(args), consent=consent)
    return 0


def _ask(question: str) -> bool:
    """A yes/no question on the terminal; anything but yes is no."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _serve(args: argparse.Namespace) -> int:
    try:  # the web stack is an extra: load it only for this command
        from .web.actions import operator_from_options
        from .web.auth import check_token
        from .web.security import TOKEN_ENV
        from .web.server import serve
    except ImportError as error:
        raise ConfigurationError(
            f"serve needs the web extra ({error.name} is missing): {install_hint('web')}"
        ) from None
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token is not None:
        check_token(token, "--token" if args.token is not None else TOKEN_ENV)
    dsn = dsn_option(args)
    operator = operator_from_options(
        args.operator_token, args.actions, dsn, schema_option(args), token
    )
    serve(
        dsn,
        listen=args.listen,
        schema=schema_option(args),
        trace_url=args.trace_url,
        token=token,
        no_auth=args.no_auth,
        access_log=args.access_log,
        announce=lambda line: print(line, flush=True),
        silent_after=args.silent_after,
        metrics_max_series=args.metrics_max_series,
        forwarded_allow_ips=_proxies(args.forwarded_allow_ips),
        operator=operator,
        overdue_factor=args.overdue_factor,
    )
    return 0


def _proxies(value: str | None) -> str | None:
    """--forwarded-allow-ips: ``*`` or a comma list of addresses and networks, checked here."""
    value = value if value is not None else os.environ.get(FORWARDED_ENV)
    if not value or value.strip() == "*":
        return value
    for item in value.split(","):
        try:
            ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            raise ConfigurationError(
                f"--forwarded-allow-ips: {item.strip()!r} is not an address or network "
                "(e.g. 10.0.0.5,10.1.0.0/16, or * for any)"
            ) from None
    return value


def _collect(args: argparse.Namespace) -> int:
    try:  # the receiver's stack is an extra: load it only for this command
        import grpc  # noqa: F401 - the gRPC listener's server
        import uvicorn  # noqa: F401 - serve_collect runs it; missing, say so here

        from ._ingest import JobMapping, serve_collect
    except ImportError as error:
        raise ConfigurationError(
            f"collect needs the collect extra ({error.name} is missing): {install_hint('collect')}"
        ) from None
    if args.settle_open_after < args.settle_after:
        raise ConfigurationError("--settle-open-after must be at least --settle-after")
    serve_collect(
        dsn_option(args),
        listen=args.listen,
        grpc_listen=args.grpc_listen,
        schema=schema_option(args),
        settle_after_s=args.settle_after.total_seconds(),
        settle_open_after_s=args.settle_open_after.total_seconds(),
        mappings=[JobMapping.parse(text) for text in args.mapping],
        dialects=args.dialects,
        max_body_bytes=args.max_body_bytes,
        retry_after_s=args.retry_after,
        body_timeout_s=args.body_timeout.total_seconds(),
        workers=args.workers,
        access_log=args.access_log,
        logs_min_severity=args.logs_min_severity,
        logs_max_per_step=args.logs_max_per_step,
        announce=lambda line: print(line, flush=True),
    )
    return 0


def _dialects(args: argparse.Namespace) -> int:
    """Each dialect in the order tried: whether it is on by default, and its source."""
    for dialect in select_dialects("all").dialects:
        default = "default" if dialect.name in DEFAULT_DIALECTS else "opt-in"
        print(f"{dialect.name:<10} {default:<8} {dialect.source}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    try:  # decoding OTLP is the collect extra's
        from ._cli.explain import explain, read_spans
        from ._ingest import JobMapping
    except ImportError as error:
        raise ConfigurationError(
            f"explain needs the collect extra ({error.name} is missing): {install_hint('collect')}"
        ) from None
    chosen = args.dialects if args.dialects is not None else os.environ.get(DIALECTS_ENV)
    dialects = select_dialects(chosen).with_mappings([JobMapping.parse(t) for t in args.mapping])
    if args.file == "-":
        spans = read_spans(sys.stdin.buffer, "<stdin>")
    else:
        try:
            with open(args.file, "rb") as file:
                spans = read_spans(file, args.file)
        except OSError as error:
            raise ConfigurationError(f"cannot read {args.file}: {describe(error)}") from None
    for line in explain(spans, dialects):
        print(line)
    return 0


# -- parser ----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr, pointing at ``--help``, and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _connection_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--dsn",
        default=default,
        help="PostgreSQL connection string (default: $OTEL_JOBSTEPS_DSN)",
    )
    parser.add_argument(
        "--schema",
        default=default,
        help="schema of the tables (default: $OTEL_JOBSTEPS_SCHEMA or public)",
    )


def _read_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--read-dsn",
        help="read from this server, e.g. a streaming replica, which lags the primary by its "
        "replay delay (default: $OTEL_JOBSTEPS_READ_DSN, else the --dsn one)",
    )


def _cutoff_options(parser: argparse.ArgumentParser, older_help: str, dry_help: str) -> None:
    parser.add_argument(
        "--older-than",
        type=duration_argument,
        required=True,
        metavar="DURATION",
        help=older_help,
    )
    parser.add_argument("--dry-run", action="store_true", help=dry_help)


def _bound_option(
    parser: argparse.ArgumentParser, flag: str, text: str, variable: str, default: int = 1000
) -> None:
    """A bound from 1 to 1,000,000 with no default here: unset, ``variable`` or ``default``
    applies where the bound is used."""
    parser.add_argument(
        flag,
        type=int_between(1, 1_000_000),
        metavar="N",
        help=f"{text} ({variable}, else {default})",
    )


def _integer_option(
    parser: argparse.ArgumentParser,
    flag: str,
    bounds: tuple[int, int],
    default: int,
    text: str,
    metavar: str | None = None,
) -> None:
    """An integer option within ``bounds`` (inclusive) that has a default."""
    parser.add_argument(
        flag, type=int_between(*bounds), default=default, metavar=metavar, help=text
    )


def _ops(args: argparse.Namespace) -> int:
    from .ops import OPS_FILES, read_ops_file

    sys.stdout.write(read_ops_file(OPS_FILES[args.ops_file]))
    return 0


def _ops_slo(args: argparse.Namespace) -> int:
    try:
        from .ops.slo import slo_rules_yaml
    except ImportError as error:
        raise ConfigurationError(
            f"ops slo needs the slo extra ({error.name} is missing): {install_hint('slo')}"
        ) from None
    try:
        with open(args.file, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"cannot read {args.file}: {describe(error)}") from None
    sys.stdout.write(slo_rules_yaml(text, args.file))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``otel-jobsteps``."""
    parser = _Parser(
        prog=PROG, description="Read and maintain the job steps otel_jobsteps records."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _connection_options(parser, None)
    # The same options after the command; SUPPRESS keeps them from hiding the ones before it.
    common = _Parser(add_help=False)
    _connection_options(common, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], text: str) -> Any:
        sub = commands.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(handler=handler)
        return sub

    migrator = command("migrate", _migrate, "apply pending migrations to the schema")
    migrator.add_argument(
        "--partitioned",
        action="store_true",
        help="also install the partitioned layout (opt-in; see docs/scale.md)",
    )
    migrator.add_argument(
        "--interval",
        type=duration_argument,
        metavar="DURATION",
        help="with --partitioned: the time one partition covers (1d); fixed once installed",
    )

    show = command("show", _show, "a job's attempts and one attempt's steps as a timeline")
    show.add_argument("domain")
    show.add_argument("job_id")
    show.add_argument(
        "--attempt", type=int_between(1, MAX_ATTEMPT), help="attempt to detail (default: latest)"
    )
    show.add_argument(
        "--before-attempt",
        type=int_between(1, MAX_ATTEMPT),
        metavar="N",
        help="list the newest attempts numbered below N (a job retried many times lists some)",
    )
    show.add_argument(
        "--diff",
        nargs=2,
        type=int_between(1, MAX_ATTEMPT),
        metavar=("A", "B"),
        help="compare attempts A and B step by step (the first divergence starred)",
    )
    show.add_argument("--json", action="store_true", help="print the job as JSON")
    show.add_argument(
        "--logs", action="store_true", help="also print the attempt's log lines (LOG rows)"
    )
    _read_option(show)

    jobs = command("jobs", _jobs, "recent jobs by their latest attempt, most recent first")
    jobs.add_argument("--domain")
    jobs.add_argument("--type", help="job type")
    jobs.add_argument("--status", type=str.upper, choices=STATUSES)
    jobs.add_argument(
        "--since", type=duration_argument, help="active within this long, e.g. 1h or 2d"
    )
    jobs.add_argument(
        "--tag",
        type=_tag_argument,
        metavar="NAME=VALUE",
        help="jobs with an attempt so tagged (NAME:VALUE works too)",
    )
    _integer_option(jobs, "--limit", (1, MAX_LIMIT), 50, "at most N jobs (50)")
    jobs.add_argument("--json", action="store_true", help="print the jobs as JSON")
    _read_option(jobs)

    steps = command("steps", _steps, "closed step durations per job type and step over a window")
    steps.add_argument(
        "--since",
        type=duration_argument,
        default=duration_argument("24h"),
        metavar="DURATION",
        help="steps closed (with --retry-tax: attempts failed) within this long (24h)",
    )
    steps.add_argument(
        "--retry-tax",
        action="store_true",
        help="what failed attempts cost instead: per job type and step, the attempts that "
        "failed there and the time failed attempts spent in it, with the type's p50 and p95 "
        "time to success of retried jobs (first attempt's start to the completing attempt's "
        "end)",
    )
    steps.add_argument(
        "--by-version",
        action="store_true",
        help="by release instead: per job type and step, each service.version of the attempts "
        "(in order of first appearance) with count, failures and p95, marked REGRESSED when "
        "its p95 or failure rate moved past the thresholds against the previous version",
    )
    steps.add_argument(
        "--p95-factor", metavar="X", help="with --by-version: p95 more than X times (1.5)"
    )
    steps.add_argument(
        "--failure-points",
        metavar="Y",
        help="with --by-version: failure rate up more than Y percentage points (5)",
    )
    steps.add_argument(
        "--min-samples", metavar="N", help="with --by-version: at least N steps each side (20)"
    )
    steps.add_argument("--json", action="store_true", help="print the rows as JSON")
    _read_option(steps)

    tail = command(
        "tail",
        _tail,
        "follow steps and events live: polls job_event for rows with a higher id and for the "
        "ended_at of the steps it saw open; Ctrl-C stops",
    )
    tail.add_argument("--domain")
    _read_option(tail)
    tail.add_argument(
        "--interval",
        type=seconds_between(MIN_INTERVAL_S, MAX_INTERVAL_S),
        default=1.0,
        help=f"seconds between polls, at least {MIN_INTERVAL_S:g} (1)",
    )

    sweeper = command(
        "sweep",
        _sweep,
        "close open steps whose execution went silent (no start or heartbeat for DURATION) as "
        "FAILED abandoned, and write their attempts' job_log",
    )
    _cutoff_options(
        sweeper,
        "silence that means dead, well above the heartbeat interval, e.g. 15m",
        "only list what would close",
    )

    pruner = command(
        "prune",
        _prune,
        "delete attempts whose job_log is older than DURATION, with their job_event rows, "
        "in batches; never an open step",
    )
    _cutoff_options(pruner, "age of the final job_log row, e.g. 30d", "only count what would go")
    _integer_option(
        pruner, "--batch-size", (1, MAX_BATCH_SIZE), 1000, "job_log rows per transaction"
    )

    demo = command(
        "demo", _demo, "record a sample job with two attempts and show it (no DSN: embedded)"
    )
    demo.add_argument(
        "--migrate",
        action="store_true",
        help="with a DSN: apply the migrations it lacks without asking (it asks on a terminal)",
    )

    add_action_commands(command)

    web = command(
        "serve", _serve, "the recorded jobs as web pages and JSON (read-only, or --operator-token)"
    )
    web.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (127.0.0.1:8080)")
    web.add_argument(
        "--trace-url",
        metavar="TEMPLATE",
        help="trace viewer link, http(s) with {trace_id}, {span_id}, {start_ms}, {end_ms}",
    )
    web.add_argument(
        "--token",
        help="required of every request, at least 16 characters (default: "
        "$OTEL_JOBSTEPS_WEB_TOKEN)",
    )
    web.add_argument(
        "--no-auth", action="store_true", help="allow a non-loopback --listen without a token"
    )
    add_operator_options(web)
    web.add_argument(
        "--silent-after",
        type=duration_argument,
        default=duration_argument("5m"),
        metavar="DURATION",
        help="an open step with no start or heartbeat for this long counts as silent in "
        "/metrics (5m)",
    )
    web.add_argument(
        "--overdue-factor",
        type=factor_argument,
        default=3.0,
        metavar="FACTOR",
        help="a running step is overdue past FACTOR x its p99 of the last 7 days (at least 20 "
        "completed): /running, /api/running and /metrics (3)",
    )
    web.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="believe X-Forwarded-For/-Proto from these reverse proxies only (comma list of "
        f"addresses or networks, * for any; default: ${FORWARDED_ENV}, else none)",
    )
    _bound_option(
        web,
        "--metrics-max-series",
        "label sets per gauge of /metrics; the rest are added up into one __other__ series",
        "OTEL_JOBSTEPS_METRICS_MAX_SERIES",
    )
    collect = command(
        "collect",
        _collect,
        "OTLP receiver, HTTP (POST /v1/traces and /v1/logs, protobuf or JSON, gzip) and gRPC "
        "(TraceService and LogsService Export): received spans and log records become "
        "job_event and job_log rows, as the processor writes them",
    )
    collect.add_argument(
        "--listen", default="127.0.0.1:4318", help="OTLP/HTTP's HOST:PORT (127.0.0.1:4318)"
    )
    collect.add_argument(
        "--grpc-listen",
        default="127.0.0.1:4317",
        metavar="HOST:PORT",
        help="OTLP/gRPC's HOST:PORT, or off (127.0.0.1:4317)",
    )
    for flag, default, what in (
        (
            "--settle-after",
            "10m",
            "an attempt's spans after its final row and its job's last span; then late copies of "
            "it are dropped (a new attempt is always taken)",
        ),
        (
            "--settle-open-after",
            "24h",
            "an attempt still waiting for spans (a step or job span not ended yet), and spans "
            "whose job span has not arrived: longer than your longest job; then they are "
            "settled, or dropped",
        ),
    ):
        collect.add_argument(
            flag,
            type=duration_argument,
            default=duration_argument(default),
            metavar="DURATION",
            help=f"how long after its last span arrived to keep {what} ({default})",
        )
    collect.add_argument(
        "--body-timeout",
        type=duration_argument,
        default=duration_argument("10s"),
        metavar="DURATION",
        help="longest an HTTP request body may take to arrive; slower ones get 408 (10s)",
    )
    collect.add_argument(
        "--mapping",
        action="append",
        default=[],
        metavar="id=ATTR,domain=ATTR[,type=ATTR][,attempt=ATTR[+N]]",
        help="job spans of another queue library (BullMQ's are understood without this)",
    )
    collect.add_argument(
        "--dialects",
        metavar="NAMES",
        help="other instrumentations read as jobs: a comma list, all or none "
        "(default: OTEL_JOBSTEPS_DIALECTS, else every dialect but messaging; docs/dialects.md)",
    )
    _integer_option(
        collect,
        "--max-body-bytes",
        (1024, 1 << 30),
        16 << 20,
        "largest request body after gunzip; larger ones get 413 (16 MiB)",
    )
    _integer_option(
        collect,
        "--retry-after",
        (1, 3600),
        2,
        "Retry-After of 503 answers while the database is away (2)",
        metavar="SECONDS",
    )
    collect.add_argument(
        "--logs-min-severity",
        metavar="SEVERITY",
        help="log records below it are not written: a name (INFO, WARN...) or 0..24 "
        "(OTEL_JOBSTEPS_LOGS_MIN_SEVERITY, else INFO)",
    )
    _bound_option(
        collect,
        "--logs-max-per-step",
        "LOG rows kept per attempt and step; one more row counts the rest",
        "OTEL_JOBSTEPS_LOGS_MAX_PER_STEP",
    )
    _integer_option(
        collect,
        "--workers",
        (1, 64),
        1,
        "processes sharing the ports; each decodes and derives on its own core (1)",
    )
    for server in (web, collect):
        _access_log_option(server)
    command("dialects", _dialects, "the dialects in the order tried: default or opt-in, source")
    explainer = command(
        "explain",
        _explain,
        "what each span of an OTLP/JSON file becomes: the dialect that claimed it and the job, "
        "attempt and step it lands in, or why it is in no job",
    )
    explainer.add_argument(
        "file",
        metavar="FILE",
        help="OTLP/JSON, one ExportTraceServiceRequest per line (the Collector's file "
        "exporter); - for stdin",
    )
    explainer.add_argument(
        "--dialects",
        metavar="LIST",
        help=f"all, none or a comma list of dialects (${DIALECTS_ENV}, else the default set)",
    )
    explainer.add_argument(
        "--mapping",
        action="append",
        default=[],
        metavar="id=ATTR,domain=ATTR[,type=ATTR][,attempt=ATTR[+N]]",
        help="job spans of another queue library, as collect's --mapping",
    )
    ops = command("ops", _ops, "print a file for operators shipped with the package")
    files = ops.add_subparsers(dest="ops_file", required=True, metavar="FILE")
    files.add_parser("alerts", help="Prometheus alerting rules for the exported metrics (YAML)")
    files.add_parser(
        "dashboard", help="the Grafana dashboard (JSON: Prometheus and PostgreSQL inputs)"
    )
    slo = files.add_parser(
        "slo",
        help="Prometheus recording rules and burn-rate alerts for the step SLOs in a YAML file "
        "(docs/operations.md, Step SLOs)",
    )
    slo.add_argument("file", metavar="FILE", help="the objectives (see ops/slo.example.yml)")
    slo.set_defaults(handler=_ops_slo)
    return parser


def _access_log_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="print one JSON line per request: method, path (token masked), status, duration",
    )


def _undecodable(args: argparse.Namespace) -> str | None:
    """The name of the first argument that is not valid UTF-8, if any."""
    for name, value in vars(args).items():
        texts = value if isinstance(value, list) else [value]
        if any(isinstance(text, str) and not is_utf8(text) for text in texts):
            return name
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    undecodable = _undecodable(args)
    if undecodable is not None:
        parser.error(f"argument {undecodable} is not valid UTF-8")
    try:
        code: int = args.handler(args)
    except JobStepsError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except psycopg.Error as error:
        print(f"{PROG}: database error: {describe(error)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``): quiet the interpreter's final flush of stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
