"""``march serve [options]``: parse arguments, build the Config, run the server. Nothing else.

Every option is also a TOML key and a ``MARCH_<NAME>`` environment variable (see ``config``).
SIGTERM/SIGINT stop the server gracefully (the orderly stop: a cluster node hands its groups over
first); a second signal forces an immediate exit.

**A stop signal is never lost and never takes the default action** (which would end the process
with no hand-over and status -15). ``march serve`` blocks SIGTERM and SIGINT before anything else,
so one that arrives early stays pending; the event loop's handler is installed first thing in
``_serve`` and only then are they unblocked (a pending one is acted on at once). They are blocked
again before the loop closes (closing it puts the default action back). A node whose layout
changed executes its own command line again (``_start_again``) with them still blocked: the
signal mask and a pending signal survive ``exec``, so a SIGTERM that lands while the node steps
down, during the exec or while the new image starts is acted on as soon as the new image has its
handler. A node told to stop while its layout changes does not start again at all: it exits with
status 0 (it has stepped down and given its leader keys back).

Passwords given as flags (``--requirepass``, ``--etcd-password``) would sit in the process list
for the server's whole life: ``march serve`` moves them into its environment and starts itself
again without them (same pid, before anything else happens). The config file or ``MARCH_*``
variables keep them out of the process list altogether.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import NoReturn

import uvloop

from march import config as config_mod
from march import log as march_log
from march.backup import operations as backup_ops
from march.backup.checks import BackupError, Checks
from march.backup.floors import floors_from_csv, floors_from_redis, floors_from_table
from march.backup.format import read_backup_file, with_margin
from march.backup.report import Summary
from march.backup.through import through_primary
from march.cluster import layout as layout_mod
from march.commands.table import COMMANDS  # (importing the commands package registers every command)
from march.errors import LayoutChanged, StoreError
from march.etcd.keypath import KeyPaths
from march.node import etcd_client
from march.server import ListenError, serve
from march.store.contract import SequenceRecord
from march.version import VERSION


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="march", description="March: an ID sequencer that speaks the Redis protocol.")
    parser.add_argument("--version", action="version", version=f"march {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a March node", description="Run a March node.")
    add_config_options(serve)
    sub.add_parser("commands", help="print the command table (Markdown), as in the README")
    backup = sub.add_parser(
        "backup", help="write every sequence, user and worker record to FILE", description=backup_ops.__doc__
    )
    backup.add_argument("file", metavar="FILE", help="the backup file (- for stdout)")
    add_config_options(backup)
    restore = sub.add_parser("restore", help="load a backup (ceilings only raised)", description=backup_ops.__doc__)
    restore.add_argument("file", metavar="FILE", help="the backup file (- for stdin)")
    restore.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    restore.add_argument(
        "--margin",
        type=int,
        default=0,
        metavar="N",
        help="add N to every plain sequence's ceiling: the IDs handed out since the backup, when the store lost them",
    )
    add_through_options(restore)
    add_config_options(restore)
    imp = sub.add_parser(
        "import-floors",
        help="set sequences' floors from existing data (dry run unless --apply)",
        description="Set each sequence's floor (its next ID is above it) from a table, a CSV or a Redis.",
    )
    source = imp.add_mutually_exclusive_group(required=True)
    source.add_argument("--dsn", help="SQLAlchemy URL of the database (with --table and --column)")
    source.add_argument("--csv", metavar="FILE", help="a CSV of key,max_id rows (- for stdin)")
    source.add_argument("--from-redis", metavar="URL", help="a running Redis: its integer keys and their values")
    imp.add_argument("--table", help="the table (schema.table allowed) whose MAX(column) is the floor")
    imp.add_argument("--column", help="the ID column")
    imp.add_argument("--key", help="the sequence to set (default: the table's name)")
    imp.add_argument("--apply", action="store_true", help="write the floors (default: a dry run)")
    add_through_options(imp)
    add_config_options(imp)
    sub.add_parser("config-reference", help="print the configuration reference (Markdown), as in the README")
    groups = sub.add_parser(
        "groups",
        help="show the cluster's leadership groups, or change their number (docs/groups.md)",
        description="Show the cluster's leadership groups (slot ranges, primaries), or change their number to N.",
    )
    groups.add_argument("target", metavar="N", nargs="?", type=int, help="the new number of groups")
    groups.add_argument("--yes", action="store_true", help="change without asking")
    add_config_options(groups)
    return parser


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """``--config`` and one flag per option: what ``march serve`` takes, and the tools that open its store."""
    parser.add_argument("--config", metavar="FILE", help="TOML config file (also MARCH_CONFIG)")
    for o in config_mod.OPTIONS:
        flag = "--" + o.name.replace("_", "-")
        metavar = {"bool": "yes|no"}.get(o.type.__name__, o.type.__name__.upper())
        shown = ("yes" if o.default else "no") if isinstance(o.default, bool) else o.default  # as CONFIG GET shows it
        parser.add_argument(flag, dest=o.name, metavar=metavar, default=None, help=f"{o.help} (default: {shown})")


def add_through_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--through",
        metavar="HOST:PORT",
        help="raise floors through this serving primary (SET key N) instead of the store",
    )
    parser.add_argument("--user", help="the user to authenticate as on the primary (default: default)")
    parser.add_argument("--password", help="its password (also MARCH_THROUGH_PASSWORD)")


def commands_table() -> str:
    """The README's command table, generated from the registry."""
    lines = ["| command | arity | keys | what it does |", "|---|---|---|---|"]
    for spec in sorted(COMMANDS.values(), key=lambda s: (s.group, s.name)):
        first, last, step = spec.keys
        keys = "-" if first == 0 else f"{first}..{last} step {step}"
        arity = f"{spec.arity}" if spec.arity > 0 else f">= {-spec.arity}"
        lines.append(f"| `{spec.name.upper()}` | {arity} | {keys} | {spec.summary.replace('|', '/')} |")
    return "\n".join(lines)


_SECRET_FLAGS = {
    "--requirepass": "MARCH_REQUIREPASS",
    "--etcd-password": "MARCH_ETCD_PASSWORD",
    "--cluster-secret": "MARCH_CLUSTER_SECRET",
}


def without_secrets(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``argv`` without the password flags, and their values as environment variables."""
    rest: list[str] = []
    moved: dict[str, str] = {}
    i = 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        if flag in _SECRET_FLAGS and (eq or i + 1 < len(argv)):
            if not eq:
                i += 1
                value = argv[i]
            moved[_SECRET_FLAGS[flag]] = value
        else:
            rest.append(argv[i])
        i += 1
    return rest, moved


class Stopping:
    """Whether this server was told to stop by a signal: handled by the loop (``signal``), or still
    pending, blocked since the loop closed (``asked`` looks at both). ``held``: this process blocks
    the stop signals whenever the loop does not handle them (its own ``march serve``; an in-process
    caller's signals are left alone)."""

    def __init__(self, held: bool) -> None:
        self.held = held
        self.signal: signal.Signals | None = None

    def asked(self) -> bool:
        if self.signal is None and self.held:
            pending = STOP_SIGNALS & signal.sigpending()
            if pending:
                self.signal = signal.Signals(min(pending))
        return self.signal is not None

    def __str__(self) -> str:
        return self.signal.name if self.signal is not None else "none"


# The signals that stop a server (the orderly stop); blocked from the start of ``march serve`` until
# the event loop handles them, and across a restart in the same process.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def main(argv: list[str] | None = None) -> int:
    own = argv is None and len(sys.argv) > 1 and sys.argv[1] == "serve"  # this process's own command line
    if own:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # pending, never the default action (above)
        rest, moved = without_secrets(sys.argv[1:])
        if moved:  # out of the process list: the same process again, the passwords in its environment
            os.execve(sys.executable, [sys.executable, "-m", "march", *rest], {**os.environ, **moved})
    args = build_parser().parse_args(argv)
    if args.command == "commands":
        print(commands_table())
        return 0
    if args.command == "config-reference":
        print(config_mod.reference_table())
        return 0
    flags = {o.name: getattr(args, o.name) for o in config_mod.OPTIONS}
    try:
        config = config_mod.load(args.config, os.environ, flags)
    except config_mod.ConfigError as exc:
        print(f"march: {exc}", file=sys.stderr)
        return 2
    if args.command in ("backup", "restore", "import-floors"):
        return run_tool(args, config)
    if args.command == "groups":
        return uvloop.run(run_groups(args, config))
    march_log.configure(
        config.log_level, config.log_format, node_id=config.node_name(config.port), secrets=config.secrets()
    )
    stopping = Stopping(held=own)
    try:
        uvloop.run(_serve(config, stopping))
    except LayoutChanged as exc:
        if stopping.asked():  # told to stop as well: the stop wins (its groups are given back already)
            logging.getLogger("march").warning("%s; received %s meanwhile: not starting again", exc, stopping)
            return 0
        _start_again(exc)
    except (StoreError, ListenError) as exc:  # a locked data dir, a port in use: say so, no traceback
        print(f"march: {exc}", file=sys.stderr)
        return 1
    return 0


def _start_again(why: LayoutChanged) -> NoReturn:
    """The cluster's layout changed under this node, which has stepped down from every group, given
    their leader keys back and closed everything: run the same command line again in this process
    (same pid, so a supervisor, a pid file or a test's handle still follows it), to serve in the
    new layout. Sockets and the data dir's files are not inherited (Python opens them
    non-inheritable), so the new image starts as a fresh process would. SIGTERM and SIGINT stay
    blocked across the exec (``STOP_SIGNALS``): one that arrives now is acted on by the new image."""
    logging.getLogger("march").warning("%s", why)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "march", *sys.argv[1:]])


async def _serve(config: config_mod.Config, stopping: Stopping) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def on_signal(signum: int) -> None:
        if stopping.signal is None:
            stopping.signal = signal.Signals(signum)
            logging.getLogger("march").info("received %s, shutting down", stopping.signal.name)
            if not stop.done():
                stop.set_result(None)
        else:
            os._exit(1)  # a second signal: the operator wants out now

    for s in sorted(STOP_SIGNALS):
        loop.add_signal_handler(s, on_signal, s)
    if stopping.held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # handled now: one pending since the start is acted on
    try:
        await serve(config, stop)
    finally:
        if stopping.held:  # before the loop closes and the default action comes back
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def run_tool(args: argparse.Namespace, config: config_mod.Config) -> int:
    """``march backup``, ``restore`` and ``import-floors`` (``march.backup``): 0 done, 1 refused or failed."""
    try:
        if args.command == "backup":
            counts = uvloop.run(backup_ops.run_backup(config, args.file))
            print(
                f"backup: {counts.sequences} sequences, {counts.users} users, {counts.workers} worker records",
                file=sys.stderr,
            )
            return 0
        if args.command == "restore":
            data = with_margin(read_backup_file(args.file, Checks.of(config)), args.margin)
            apply, records, left_out = not args.dry_run, data.sequences, 0
        else:
            apply = args.apply
            records, left_out = _floors(args, Checks.of(config))
        summary = Summary()
        if args.through:
            password = args.password or os.environ.get("MARCH_THROUGH_PASSWORD")
            through_primary(args.through, records, args.user, password, summary, apply)
            if args.command == "restore" and (data.users or data.workers):
                summary.skipped.append(
                    "users and worker records: not through a primary (restore them with the nodes stopped)"
                )
        elif args.command == "restore":
            summary = uvloop.run(backup_ops.run_restore(config, data, dry_run=not apply))
        else:
            summary = uvloop.run(backup_ops.run_import(config, records, dry_run=not apply))
    except (BackupError, StoreError) as exc:
        print(f"march: {exc}", file=sys.stderr)
        return 1
    lines = summary.lines(apply)
    if left_out:
        lines.append(f"left out {left_out} keys that do not hold a non-negative integer")
    if not apply:
        lines.append(
            "dry run: nothing written ("
            + ("--apply" if args.command == "import-floors" else "drop --dry-run")
            + " to write)"
        )
    print("\n".join(lines))
    return 0


async def run_groups(args: argparse.Namespace, config: config_mod.Config) -> int:
    """``march groups [N]``: print the layout; with N, say what changes, confirm, change it."""
    if not config.cluster:
        print("march: groups: a cluster's layout lives in etcd: give --etcd host:port", file=sys.stderr)
        return 2
    etcd, keys, timeout = etcd_client(config, "groups"), KeyPaths.of(config.etcd_prefix), config.store_timeout
    try:
        status = await layout_mod.read_status(etcd, keys, timeout)
        print("\n".join(status.lines(config.etcd_prefix)))
        if args.target is None:
            return 0
        print("\n".join(layout_mod.change_lines(status.layout, args.target)))
        if not args.yes and not (sys.stdin.isatty() and input("go ahead? [y/N] ").strip().lower() in ("y", "yes")):
            print("nothing changed" + ("" if sys.stdin.isatty() else " (--yes to change without asking)"))
            return 1
        new = await layout_mod.change_layout(etcd, keys, args.target, timeout, expected=status.layout)
        print(f"changed: {new.describe()} since revision {new.revision}")
        return 0
    except StoreError as exc:  # refused (layout_mod.LayoutChangeRefused), unreachable, a bad record
        print(f"march: groups: {exc}", file=sys.stderr)
        return 1
    finally:
        await etcd.close()


def _floors(args: argparse.Namespace, checks: Checks) -> tuple[list[SequenceRecord], int]:
    if args.dsn:
        if not args.table or not args.column:
            raise BackupError("--dsn needs --table and --column")
        return floors_from_table(args.dsn, args.table, args.column, args.key, checks), 0
    if args.from_redis:
        return floors_from_redis(args.from_redis, checks)
    if args.csv == "-":
        return floors_from_csv(sys.stdin, checks), 0
    try:
        with open(args.csv, encoding="utf-8", newline="") as stream:
            return floors_from_csv(stream, checks), 0
    except OSError as exc:
        raise BackupError(f"{args.csv}: {exc.strerror or exc}") from None
