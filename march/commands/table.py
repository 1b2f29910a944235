"""The command table and the handler contract: ``@command(...)`` fills the table; the dispatcher,
``COMMAND`` and the README read it.

**The handler contract.** A handler is ``fn(client, args) -> result`` where ``args`` is the whole
request (``args[0]`` is the command name as sent). It raises ``CommandError``, or returns one of:

- a value for ``resp.encode`` (int, bytes, str status, list, dict, None, ...);
- when it must wait, a coroutine or an ``asyncio.Future`` (``waits``: the connection awaits it and
  keeps replies in order; a future costs no task, the connection only adds a callback);
- ``Relayed``: the request was written to another node (forwarding); its reply takes its place;
- ``NO_REPLY``: no reply at all (SHUTDOWN: the connection closes; MONITOR on a monitor);
- ``MONITOR_STARTED``: reply ``+OK`` and send this connection every later request (MONITOR);
- ``QUEUED`` (from the dispatcher, never a handler): MULTI queued the request, no call until EXEC.

The connection tells these apart by identity (``is``), on the path every request takes; they are
defined here, with the table, so the transport knows the contract (``march.commands`` exports it)
and never a command. A handler never touches the transport.

``arity`` follows Redis: N means exactly N arguments including the name, -N means at least N.
``keys`` is (first, last, step) as in ``COMMAND INFO``: cluster clients read key positions from it.
What ``COMMAND INFO`` and ``COMMAND DOCS`` say beyond that comes from the registration too, in Redis
7.0's shapes: ``tips`` (``request_policy:multi_shard``...), the key spec's flags (from
``key_access``: ``RW access update`` for INCR, ``RO access`` for GET, ``RO`` for EXISTS),
``complexity`` and ``arguments`` (``Arg``, as Redis' ``arguments`` entries).

A container command (ACL, CLIENT, CLUSTER, COMMAND, CONFIG, DEBUG, LATENCY, SENTINEL, SLOWLOG) is
one table of ``Subcommand`` rows registered by ``container``: the same rows run the requests,
reject an unknown subcommand or a wrong arity with Redis' texts, make HELP, feed ``COMMAND INFO``
/ ``COMMAND DOCS`` and ACL rules (``+client|setname``, a subcommand's own categories). Handlers read
their arguments with ``args.Args`` (one cursor, Redis' error texts).

``secrets`` declares which arguments carry a password (``Secrets``): ``redacted(args)`` replaces
them with ``(redacted)`` before SLOWLOG keeps a request or MONITOR shows it, following the
declaration of each command a request carries inside it (``ACL DRYRUN user AUTH pw``, ``COMMAND
GETKEYS HELLO 3 AUTH u pw``). A command March does not know has every argument after its name
redacted: what is not known to be harmless is not shown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from march import errors
from march.errors import CommandError
from march.resp import Encoded, SetReply
from march.stats.diagnostics import REDACTED, Redacted

if TYPE_CHECKING:
    from march.client import Client

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


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument as ``COMMAND DOCS`` describes it (an entry of Redis' ``arguments``): ``type`` is
    one of Redis' (``key``, ``string``, ``integer``, ``pattern``, ``pure-token``, ``oneof``, ``block``);
    ``key_spec``: for a key, its key spec's index; ``flags``: ``optional``, ``multiple``;
    ``arguments``: a ``oneof``'s or a ``block``'s own."""

    name: str
    type: str
    key_spec: int = -1
    token: str = ""
    flags: tuple[str, ...] = ()
    arguments: tuple[Arg, ...] = ()

    def docs(self) -> dict[bytes, Any]:
        """Its map, fields in Redis' order (``addReplyCommandArgList``)."""
        out: dict[bytes, Any] = {b"name": self.name.encode(), b"type": self.type.encode()}
        if self.key_spec >= 0:
            out[b"key_spec_index"] = self.key_spec
        if self.token:
            out[b"token"] = self.token.encode()
        if self.flags:
            out[b"flags"] = SetReply(self.flags)  # status strings in a set, as Redis
        if self.type in ("oneof", "block"):
            out[b"arguments"] = [a.docs() for a in self.arguments]
        return out


KEY = (Arg("key", "key", key_spec=0),)  # the arguments of a command of one key
KEYS = (Arg("key", "key", key_spec=0, flags=("multiple",)),)  # of a command of one key or more

# ``key_access`` -> the flags of the key spec (Redis' COMMAND INFO): RW reads and updates the value,
# R reads it, W overwrites it, "" only looks at the key (EXISTS, TYPE: Redis' ``RO`` with no ``access``)
_KEY_FLAGS = {"RW": ("RW", "access", "update"), "R": ("RO", "access"), "W": ("OW", "update"), "": ("RO",)}


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One subcommand of a container command (ACL, CLIENT, CONFIG...), one row of its table (``container``).

    ``arity`` counts as Redis does, the container's name and the subcommand's included (``CLIENT
    SETNAME name``: 3). ``categories``, ``flags`` and ``secrets``: where the subcommand differs from
    its container (None: the container's). ``usage`` and ``help`` are its lines in HELP (default: the
    name in upper case, and the summary)."""

    name: str  # lower case, as ``COMMAND INFO`` and ACL rules (``+client|setname``) name it
    arity: int
    summary: str
    handler: Handler
    usage: str = ""
    help: tuple[str, ...] = ()
    categories: tuple[str, ...] | None = None
    flags: tuple[str, ...] | None = None
    secrets: Secrets | None = None
    tips: tuple[str, ...] = ()  # Redis' command tips (COMMAND INFO), e.g. ``nondeterministic_output``

    def help_lines(self) -> list[str]:
        return [self.usage or self.name.upper(), *(f"    {line}" for line in self.help or (self.summary,))]


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
    subcommands: tuple[Subcommand, ...] = ()  # a container's table (``container``), HELP included
    primary: bool = False  # served by the primary only: standbys redirect it (MOVED)
    queued: bool = True  # inside MULTI it is queued for EXEC (False: it acts at once)
    key_access: str = "RW"  # what ACL key patterns must allow: "R", "W", "RW", or "" (metadata: either)
    channels: str = ""  # its arguments are channels ("channel": SUBSCRIBE) or patterns ("pattern": PSUBSCRIBE) for ACL
    sub_categories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a subcommand's own
    sub_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a subcommand's own (Redis' COMMAND INFO)
    secrets: Mapping[str, Secrets] = field(default_factory=dict)  # subcommand ("" for the command) -> its secrets
    # the subcommands by name as sent in lower case, and (below) in upper case: most requests need no ``.lower()``
    sub_index: Mapping[bytes, Subcommand] = field(default_factory=dict)
    # a container's first check, before its subcommand is looked at (DEBUG while it is off: refused)
    gate: Callable[[Client], None] | None = None
    tips: tuple[str, ...] = ()  # Redis' command tips (COMMAND INFO): request/response policies, output
    complexity: str = ""  # COMMAND DOCS
    arguments: tuple[Arg, ...] = ()  # COMMAND DOCS

    @property
    def key_flags(self) -> tuple[str, ...]:
        """The flags of its key spec, as Redis' COMMAND INFO names them (from ``key_access``)."""
        return _KEY_FLAGS[self.key_access]

    def categories_of(self, sub: str) -> tuple[str, ...]:
        """A subcommand's ACL categories (its own, else the command's)."""
        return self.sub_categories.get(sub, self.categories)

    def flags_of(self, sub: str) -> tuple[str, ...]:
        """A subcommand's flags (its own, else the command's), as Redis' COMMAND INFO lists them."""
        return self.sub_flags.get(sub, self.flags)

    def find(self, arg: bytes) -> Subcommand | None:
        """The subcommand ``arg`` names (any case), or None."""
        sub = self.sub_index.get(arg)
        return sub if sub is not None else self.sub_index.get(arg.lower())

    def subcommand(self, args: list[bytes]) -> str:
        """The registered subcommand ``args`` names (lower case), or "" (no subcommands, or not one of them)."""
        if not self.subcommands or len(args) < 2:
            return ""
        sub = self.find(args[1])
        return "" if sub is None else sub.name

    def subcommand_ok(self, args: list[bytes]) -> bool:
        """Whether ``args`` gets past its container's table: no subcommands, or a known one with its arity."""
        if not self.subcommands:
            return True
        sub = self.find(args[1]) if len(args) > 1 else None
        return sub is not None and _arity_ok(sub.arity, len(args))

    @property
    def noauth(self) -> bool:
        return "no_auth" in self.flags

    def arity_ok(self, n: int) -> bool:
        return _arity_ok(self.arity, n)

    def key_positions(self, n_args: int) -> list[int]:
        first, last, step = self.keys
        if first == 0:
            return []
        end = n_args + last if last < 0 else min(last, n_args - 1)
        return list(range(first, end + 1, step))


def _arity_ok(arity: int, n: int) -> bool:
    """Redis' rule: ``arity`` N means exactly N arguments (the name included), -N at least N."""
    return n == arity if arity > 0 else n >= -arity


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


COMMANDS: dict[str, CommandSpec] = {}
# Dispatch table keyed by the name as sent; filled with lower- and upper-case spellings so the
# common case needs no ``.lower()``; anything else falls back to a lower-cased lookup.
SPELLINGS: dict[bytes, CommandSpec] = {}
# The server's fast path, keyed like SPELLINGS.
HOT: dict[bytes, Hot] = {}


# Longer than 60 lines: its keywords are the registration's vocabulary, one per line and each
# explained in the docstring; the body only builds the ``CommandSpec``.
def command(
    name: str,
    arity: int,
    flags: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    keys: tuple[int, int, int] = (0, 0, 0),
    summary: str = "",
    group: str = "generic",
    subcommands: tuple[Subcommand, ...] = (),
    hot: bool = False,
    consecutive: Consecutive | None = None,
    primary: bool | None = None,
    queued: bool = True,
    key_access: str | None = None,
    secrets: Secrets | None = None,
    gate: Callable[[Client], None] | None = None,
    channels: str = "",
    tips: tuple[str, ...] = (),
    complexity: str = "",
    arguments: tuple[Arg, ...] = (),
) -> Callable[[Handler], Handler]:
    """Register a handler. ``primary``: served by the primary only (default: when it has keys);
    ``queued``: queued inside MULTI (False for the commands that act at once: EXEC, DISCARD...);
    ``key_access``: what an ACL key pattern must allow on its keys, as Redis' key specs say
    ("R" reads the value, "W" writes it, "RW" both, "" only looks at whether it exists; default:
    "R" for a readonly command, "RW" otherwise); ``subcommands``: a container's table (``container``),
    with each subcommand's own ACL categories (CLIENT KILL is @admin, CLIENT ID is not), flags (MONITOR
    does not show CLIENT LIST, ``admin``) and secrets; ``secrets``: what MONITOR and SLOWLOG never show;
    ``channels``: every argument is a channel ("channel") or a pattern ("pattern") that ACL channel
    rules (``&``) must allow, as Redis 7 checks SUBSCRIBE and PSUBSCRIBE;
    ``tips``, ``complexity``, ``arguments``: what COMMAND INFO and COMMAND DOCS say of it, as Redis."""

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
            sub_categories={s.name: s.categories for s in subcommands if s.categories is not None},
            sub_flags={s.name: s.flags for s in subcommands if s.flags is not None},
            secrets={
                **({"": secrets} if secrets is not None else {}),
                **{s.name: s.secrets for s in subcommands if s.secrets is not None},
            },
            sub_index={
                **{s.name.encode(): s for s in subcommands},
                **{s.name.upper().encode(): s for s in subcommands},
            },
            gate=gate,
            channels=channels,
            tips=tips,
            complexity=complexity,
            arguments=arguments,
        )
        COMMANDS[name] = spec
        SPELLINGS[name.encode()] = spec
        SPELLINGS[name.upper().encode()] = spec
        if hot:
            HOT[name.encode()] = HOT[name.upper().encode()] = Hot(arity, fn, consecutive)
        return fn

    return register


_HELP_FLAGS = ("loading", "stale")  # Redis' flags of every container's HELP


def container(
    name: str,
    flags: tuple[str, ...],
    categories: tuple[str, ...],
    subcommands: tuple[Subcommand, ...],
    summary: str,
    group: str,
    help_categories: tuple[str, ...] | None = None,
    bare: Handler | None = None,
    gate: Callable[[Client], None] | None = None,
    tips: tuple[str, ...] = (),
) -> None:
    """Register a container command (``ACL``, ``CLIENT``, ``CONFIG``...) from its table.

    The command runs the subcommand its first argument names (any case) with the whole request;
    an unknown one is ``ERR unknown subcommand 'x'. Try NAME HELP.`` and a wrong count of arguments
    ``ERR wrong number of arguments for 'name|sub' command`` (Redis 7's texts). ``HELP`` (arity 2,
    ``loading stale``, ``help_categories`` or the container's) is added to the table, its reply made
    from the table in Redis' shape. ``bare``: what the command alone does (``COMMAND``: every
    command's details); without it the command needs a subcommand (arity -2). ``gate``: run before
    anything else (DEBUG refuses everything while it is off, HELP too, as Redis)."""
    lines = [f"{name.upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
    lines += [line for row in subcommands for line in row.help_lines()]
    lines += ["HELP", "    Prints this help."]

    def help_(client: Client, args: list[bytes]) -> Any:
        return list(lines)  # status lines, as Redis' HELP

    rows = (
        *subcommands,
        Subcommand("help", 2, "Show the subcommands.", help_, categories=help_categories, flags=_HELP_FLAGS),
    )

    def run(client: Client, args: list[bytes]) -> Any:
        if bare is not None and len(args) == 1:
            return bare(client, args)
        return find_subcommand(spec, args).handler(client, args)  # (``check_container`` passed it)

    arity = -2 if bare is None else -1
    command(name, arity, flags, categories, summary=summary, group=group, subcommands=rows, gate=gate, tips=tips)(run)
    spec = COMMANDS[name]


def check_container(client: Client, spec: CommandSpec, args: list[bytes]) -> None:
    """A container's checks, in Redis' order, right after the command's arity (``dispatch.call``):
    its gate, then its subcommand (known, with its arity). Like an unknown command, an unknown
    subcommand is refused before authentication, ACL and MULTI look at it (Redis 7 knows subcommands
    when it looks a command up): inside MULTI it dooms the transaction, as in Redis."""
    if spec.gate is not None:
        spec.gate(client)
    if len(args) > 1:
        find_subcommand(spec, args)


def find_subcommand(spec: CommandSpec, args: list[bytes]) -> Subcommand:
    """The subcommand of ``args``, once its arity is right, with Redis' error texts."""
    sub = spec.find(args[1])
    if sub is None:
        raise CommandError(errors.UNKNOWN_SUBCOMMAND.format(args[1].decode("utf-8", "replace"), spec.name.upper()))
    if not _arity_ok(sub.arity, len(args)):
        raise errors.wrong_arity(f"{spec.name}|{sub.name}")
    return sub


# --- what a handler may return besides a value (see the module docstring) ---------------------------


def waits(result: Any) -> bool:
    """A handler's result that is not a value yet: a coroutine or a future, to be awaited."""
    return asyncio.iscoroutine(result) or isinstance(result, asyncio.Future)


class Relayed:
    """A request already written to another node (``commands.forward``): the connection answers the
    requests after it meanwhile and puts this one's reply in its place. Awaiting it gives the reply
    as the other node encoded it, or raises its error."""

    __slots__ = ("_reply",)

    def __init__(self, reply: Callable[[], Coroutine[Any, Any, Encoded]]) -> None:
        self._reply = reply

    def __await__(self) -> Generator[Any, None, Encoded]:
        return self._reply().__await__()


class _NoReply:
    """No reply at all: SHUTDOWN that succeeds (the connection just closes), MONITOR on a monitor."""

    def __repr__(self) -> str:
        return "NO_REPLY"


class _MonitorStarted:
    """MONITOR's result: the connection replies +OK and is sent every later request."""

    def __repr__(self) -> str:
        return "MONITOR_STARTED"


NO_REPLY = _NoReply()
MONITOR_STARTED = _MonitorStarted()
QUEUED = "QUEUED"  # a request MULTI queued (the dispatcher's result): +QUEUED, no call until EXEC runs it


def lookup(name: bytes) -> CommandSpec | None:
    spec = SPELLINGS.get(name)
    if spec is None:
        spec = SPELLINGS.get(name.lower())
    return spec


def lookup_full(name: bytes) -> tuple[CommandSpec, Subcommand | None] | None:
    """A command or a subcommand by its full name, as COMMAND INFO, DOCS and LATENCY HISTOGRAM take
    them (``incr``, ``client|list``, any case), or None."""
    top, bar, sub = name.partition(b"|")
    spec = lookup(top)
    if spec is None or not bar:
        return None if spec is None else (spec, None)
    found = spec.find(sub) if b"|" not in sub else None
    return None if found is None else (spec, found)


def register_refused(name: str, arity: int, group: str = "refused") -> None:
    """Register a Redis command March refuses, so clients get a reason, not 'unknown command'."""
    reason = errors.REFUSAL_REASONS[name]

    def handler(client: Client, args: list[bytes]) -> Any:
        raise CommandError(errors.REFUSED.format(name.upper(), reason))

    keys = (1, 1, 1) if name not in ("flushdb", "flushall") else (0, 0, 0)
    if name in ("del", "unlink"):
        keys = (1, -1, 1)
    if name in ("rename", "renamenx", "copy"):
        keys = (1, 2, 1)
    if name in ("mset", "msetnx"):
        keys = (1, -1, 2)
    command(name, arity, ("write",), ("@write",), keys, f"refused: {reason}", group)(handler)


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
