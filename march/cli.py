"""``march serve [options]``: parse arguments, build the Config, run the server. Nothing else.

Every option is also a TOML key and a ``MARCH_<NAME>`` environment variable (see ``config``).
SIGTERM/SIGINT stop the server gracefully; a second signal forces an immediate exit.

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

import uvloop

from . import config as config_mod
from . import log as march_log
from .app import VERSION
from .server import ListenError, serve
from .store.base import StoreError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="march", description="March: an ID sequencer that speaks the Redis protocol.")
    parser.add_argument("--version", action="version", version=f"march {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a March node", description="Run a March node.")
    serve.add_argument("--config", metavar="FILE", help="TOML config file (also MARCH_CONFIG)")
    for o in config_mod.OPTIONS:
        flag = "--" + o.name.replace("_", "-")
        metavar = {"bool": "yes|no"}.get(o.type.__name__, o.type.__name__.upper())
        shown = ("yes" if o.default else "no") if isinstance(o.default, bool) else o.default  # as CONFIG GET shows it
        serve.add_argument(flag, dest=o.name, metavar=metavar, default=None, help=f"{o.help} (default: {shown})")
    sub.add_parser("commands", help="print the command table (Markdown), as in the README")
    sub.add_parser("config-reference", help="print the configuration reference (Markdown), as in the README")
    return parser


def commands_table() -> str:
    """The README's command table, generated from the registry."""
    from .commands.registry import REGISTRY

    lines = ["| command | arity | keys | what it does |", "|---|---|---|---|"]
    for spec in sorted(REGISTRY.values(), key=lambda s: (s.group, s.name)):
        first, last, step = spec.keys
        keys = "-" if first == 0 else f"{first}..{last} step {step}"
        arity = f"{spec.arity}" if spec.arity > 0 else f">= {-spec.arity}"
        lines.append(f"| `{spec.name.upper()}` | {arity} | {keys} | {spec.summary.replace('|', '/')} |")
    return "\n".join(lines)


_SECRET_FLAGS = {"--requirepass": "MARCH_REQUIREPASS", "--etcd-password": "MARCH_ETCD_PASSWORD"}


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


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "serve":
        rest, moved = without_secrets(sys.argv[1:])
        if moved:  # out of the process list: the same process again, the passwords in its environment
            os.execve(sys.executable, [sys.executable, "-m", "march", *rest], {**os.environ, **moved})
    args = build_parser().parse_args(argv)
    if args.command == "commands":
        import march.commands  # noqa: F401  (registers every command)

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
    march_log.configure(
        config.log_level, config.log_format, node_id=config.node_name(config.port), secrets=config.secrets()
    )
    try:
        uvloop.run(_serve(config))
    except (StoreError, ListenError) as exc:  # a locked data dir, a port in use: say so, no traceback
        print(f"march: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(config: config_mod.Config) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            logging.getLogger("march").info("received %s, shutting down", signal.Signals(signum).name)
            if not stop.done():
                stop.set_result(None)
        else:
            os._exit(1)  # a second signal: the operator wants out now

    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, on_signal, s)
    await serve(config, stop)
