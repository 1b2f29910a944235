"""The command registry: ``@command(...)`` fills it; the dispatcher, ``COMMAND`` and the README read it.

A handler is ``fn(client, args) -> value`` where ``args`` is the whole request (``args[0]`` is the
command name as sent). It returns a value for ``resp.encode`` (int, bytes, str status, list, dict,
None, ...) or a coroutine when it must wait (the dispatcher awaits it and keeps replies in order),
or raises ``CommandError``. A handler never touches the transport.

``arity`` follows Redis: N means exactly N arguments including the name, -N means at least N.
``keys`` is (first, last, step) as in ``COMMAND INFO``: cluster clients read key positions from it.

``secrets`` declares which arguments carry a password (``Secrets``): ``redacted(args)`` replaces
them with ``(redacted)`` before SLOWLOG keeps a request or MONITOR shows it, following the
declaration of each command a request carries inside it (``ACL DRYRUN user AUTH pw``, ``COMMAND
GETKEYS HELLO 3 AUTH u pw``). A command March does not know has every argument after its name
redacted: what is not known to be harmless is not shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..diagnostics import REDACTED, Redacted
from ..errors import REFUSAL_REASONS, REFUSED, UNKNOWN_SUBCOMMAND, CommandError, wrong_arity

if TYPE_CHECKING:
    from ..client import Client

Handler = Callable[["Client", list[bytes]], Any]
Consecutive = Callable[["Client", list[bytes], int], "range | None"]


@dataclass(frozen=True, slots=True)
class Secrets:
    """Which arguments of a request (or of one subcommand's requests) carry a secret.

    Positions count from the command's name (0), whatever comes before it when it is carried
    inside another command. Each field is one way a secret appears; a declaration may use several.
    """

    start: int = 1  # the first position looked at
    rest: bool = False  # every argument from ``start`` on (AUTH password, AUTH user password)
    # keyword (lower case) -> how many arguments after it are secret (HELLO ... AUTH user pass)
    after: Mapping[bytes, int] = field(default_factory=dict)
    # ``name value`` pairs from ``start``: the value, when this says the name is secret (CONFIG SET)
    pairs: Callable[[bytes], bool] | None = None
    # a request for another command starts here (ACL DRYRUN, COMMAND GETKEYS): its own declaration applies
    command: int = 0


@dataclass(eq=False)
class CommandSpec:
    name: str
    handler: Handler
    arity: int
    flags: tuple[str, ...]
    categories: tuple[str, ...]
    keys: tuple[int, int, int]
    summary: str
    group: str
    subcommands: tuple[tuple[str, int, str], ...] = ()  # (name, arity, summary)
    primary: bool = False  # served by the primary only: standbys redirect it (MOVED)
    queued: bool = True  # inside MULTI it is queued for EXEC (False: it acts at once)
    key_access: str = "RW"  # what ACL key patterns must allow: "R", "W", "RW", or "" (metadata: either)
    sub_categories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a subcommand's own
    sub_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a subcommand's own (Redis' COMMAND INFO)
    secrets: Mapping[str, Secrets] = field(default_factory=dict)  # subcommand ("" for the command) -> its secrets

    def categories_of(self, sub: str) -> tuple[str, ...]:
        """A subcommand's ACL categories (its own, else the command's)."""
        return self.sub_categories.get(sub, self.categories)

    def flags_of(self, sub: str) -> tuple[str, ...]:
        """A subcommand's flags (its own, else the command's), as Redis' COMMAND INFO lists them."""
        return self.sub_flags.get(sub, self.flags)

    def subcommand(self, args: list[bytes]) -> str:
        """The registered subcommand ``args`` names (lower case), or "" (no subcommands, or not one of them)."""
        if not self.subcommands or len(args) < 2:
            return ""
        sub = args[1].lower().decode("utf-8", "replace")
        return sub if any(name == sub for name, _, _ in self.subcommands) else ""

    def subcommand_ok(self, args: list[bytes]) -> bool:
        """Whether ``check_subcommand`` lets ``args`` through: no subcommands, or a known one with its arity."""
        if not self.subcommands:
            return True
        sub = args[1].lower() if len(args) > 1 else b""
        for name, arity, _ in self.subcommands:
            if name.encode() == sub:
                return len(args) == arity if arity > 0 else len(args) >= -arity
        return sub == b"help"  # a container that does not register HELP takes it with any arguments

    @property
    def noauth(self) -> bool:
        return "no_auth" in self.flags

    def arity_ok(self, n: int) -> bool:
        a = self.arity
        return n == a if a > 0 else n >= -a

    def key_positions(self, n_args: int) -> list[int]:
        first, last, step = self.keys
        if first == 0:
            return []
        end = n_args + last if last < 0 else min(last, n_args - 1)
        return list(range(first, end + 1, step))


@dataclass(frozen=True, slots=True)
class Hot:
    """A command the server's fast path runs directly (registered ``hot=True``): one that never
    changes connection state (authentication, MULTI, protocol), called only with its exact arity
    on a plain connection."""

    arity: int
    handler: Handler
    # ``consecutive(client, args, count)`` answers up to ``count`` identical pipelined requests at
    # once: their integer replies (a range, at least one), or None to run the next one singly.
    consecutive: Consecutive | None


REGISTRY: dict[str, CommandSpec] = {}
# Dispatch table keyed by the name as sent; filled with lower- and upper-case spellings so the
# common case needs no ``.lower()``; anything else falls back to a lower-cased lookup.
TABLE: dict[bytes, CommandSpec] = {}
# The server's fast path, keyed like TABLE.
HOT: dict[bytes, Hot] = {}


def command(
    name: str,
    arity: int,
    flags: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    keys: tuple[int, int, int] = (0, 0, 0),
    summary: str = "",
    group: str = "generic",
    subcommands: tuple[tuple[str, int, str], ...] = (),
    hot: bool = False,
    consecutive: Consecutive | None = None,
    primary: bool | None = None,
    queued: bool = True,
    key_access: str | None = None,
    sub_categories: Mapping[str, tuple[str, ...]] | None = None,
    sub_flags: Mapping[str, tuple[str, ...]] | None = None,
    secrets: Mapping[str, Secrets] | None = None,
) -> Callable[[Handler], Handler]:
    """Register a handler. ``primary``: served by the primary only (default: when it has keys);
    ``queued``: queued inside MULTI (False for the commands that act at once: EXEC, DISCARD...);
    ``key_access``: what an ACL key pattern must allow on its keys, as Redis' key specs say
    ("R" reads the value, "W" writes it, "RW" both, "" only looks at whether it exists; default:
    "R" for a readonly command, "RW" otherwise); ``sub_categories``: subcommands whose ACL
    categories differ from the command's (CLIENT KILL is @admin, CLIENT ID is not), so that
    ``+@category``/``-@category`` grant or take them one by one, as in Redis; ``sub_flags``: the
    same for flags (MONITOR does not show CLIENT LIST, which is ``admin``, and shows CLIENT ID);
    ``secrets``: the arguments MONITOR and SLOWLOG must never show, by subcommand ("" for the
    command itself)."""

    def register(fn: Handler) -> Handler:
        spec = CommandSpec(
            name,
            fn,
            arity,
            flags,
            categories,
            keys,
            summary or (fn.__doc__ or "").strip(),
            group,
            subcommands,
            primary=keys[0] != 0 if primary is None else primary,
            queued=queued,
            key_access=("R" if "readonly" in flags else "RW") if key_access is None else key_access,
            sub_categories=dict(sub_categories or {}),
            sub_flags=dict(sub_flags or {}),
            secrets=dict(secrets or {}),
        )
        REGISTRY[name] = spec
        TABLE[name.encode()] = spec
        TABLE[name.upper().encode()] = spec
        if hot:
            HOT[name.encode()] = HOT[name.upper().encode()] = Hot(arity, fn, consecutive)
        return fn

    return register


def lookup(name: bytes) -> CommandSpec | None:
    spec = TABLE.get(name)
    if spec is None:
        spec = TABLE.get(name.lower())
    return spec


def refuse(name: str, arity: int, group: str = "refused") -> None:
    """Register a Redis command March refuses, so clients get a reason, not 'unknown command'."""
    reason = REFUSAL_REASONS[name]

    def handler(client: Client, args: list[bytes]) -> Any:
        raise CommandError(REFUSED.format(name.upper(), reason))

    keys = (1, 1, 1) if name not in ("flushdb", "flushall") else (0, 0, 0)
    if name in ("del", "unlink"):
        keys = (1, -1, 1)
    if name in ("rename", "renamenx", "copy"):
        keys = (1, 2, 1)
    if name in ("mset", "msetnx"):
        keys = (1, -1, 2)
    command(name, arity, ("write",), ("@write",), keys, f"refused: {reason}", group)(handler)


def check_subcommand(name: str, args: list[bytes]) -> bytes:
    """The subcommand of ``args`` (lower-cased), once its arity is right, with Redis' error texts."""
    sub = args[1].lower()
    subcommands = REGISTRY[name].subcommands
    if sub == b"help" and all(s != "help" for s, _, _ in subcommands):
        return sub  # (a container that does not register HELP takes it with any arguments)
    for sub_name, arity, _ in subcommands:
        if sub_name.encode() == sub:
            if not (len(args) == arity if arity > 0 else len(args) >= -arity):
                raise wrong_arity(f"{name}|{sub_name}")
            return sub
    raise CommandError(UNKNOWN_SUBCOMMAND.format(args[1].decode("utf-8", "replace"), name.upper()))


def run_subcommand(name: str, table: Mapping[bytes, Handler], client: Client, args: list[bytes]) -> Any:
    """Run the handler ``table`` has for the subcommand of ``args`` (Redis' errors for an unknown one
    or a wrong arity, from ``check_subcommand``). A container command's table names every
    registered subcommand and HELP (``tests/commands/test_registry.py`` checks it)."""
    return table[check_subcommand(name, args)](client, args)


# --- secrets ---------------------------------------------------------------------------------------

_UNKNOWN = Secrets(rest=True)  # a command March does not know: every argument after its name
_UNKNOWN_SUBCOMMAND = Secrets(start=2, rest=True)  # a subcommand it does not know: every argument after that


def redacted(args: list[bytes]) -> Redacted:
    """``args`` with every declared secret replaced by ``(redacted)``; a copy (``args`` is unchanged).

    A request carrying another (``ACL DRYRUN u HELLO 3 AUTH u pw``) is walked down, one command at
    a time (a loop, not recursion: a request of 4,000 nested ``ACL DRYRUN`` costs 4,000 steps, no stack).
    """
    out = list(args)
    at = 0  # where the command being looked at starts
    while at < len(out):
        spec = lookup(args[at])
        rule: Secrets | None
        if spec is None:
            rule = _UNKNOWN
        elif spec.subcommands:
            sub = spec.subcommand(args[at : at + 2])
            rule = spec.secrets.get(sub) if sub else _UNKNOWN_SUBCOMMAND
        else:
            rule = spec.secrets.get("")
        if rule is None:
            break
        _apply(rule, args, out, at)
        if not rule.command or at + rule.command >= len(out):
            break
        at += rule.command
    return Redacted(out)


def _apply(rule: Secrets, args: list[bytes], out: list[bytes], at: int) -> None:
    n = len(args)
    end = at + rule.command if rule.command else n  # a carried command is its own declaration's
    first = at + rule.start
    if rule.rest:
        out[first:end] = [REDACTED] * max(0, end - first)
        return
    if rule.after:
        longest = max(map(len, rule.after))  # (a longer argument is no keyword: not lower-cased)
        for i in range(first, end):
            arg = args[i]
            count = rule.after.get(arg.lower(), 0) if len(arg) <= longest else 0
            for j in range(i + 1, min(i + 1 + count, end)):
                out[j] = REDACTED
    if rule.pairs is not None:
        for i in range(first, end - 1, 2):
            if rule.pairs(args[i]):
                out[i + 1] = REDACTED
