"""The command registry: ``@command(...)`` fills it; the dispatcher, ``COMMAND`` and the README read it.

A handler is ``fn(client, args) -> value`` where ``args`` is the whole request (``args[0]`` is the
command name as sent). It returns a value for ``resp.encode`` (int, bytes, str status, list, dict,
None, ...) or a coroutine when it must wait (the dispatcher awaits it and keeps replies in order),
or raises ``CommandError``. A handler never touches the transport.

``arity`` follows Redis: N means exactly N arguments including the name, -N means at least N.
``keys`` is (first, last, step) as in ``COMMAND INFO``: cluster clients read key positions from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..client import Client

Handler = Callable[["Client", list[bytes]], Any]
Consecutive = Callable[["Client", list[bytes], int], "range | None"]


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

    def categories_of(self, sub: str) -> tuple[str, ...]:
        """A subcommand's ACL categories (its own, else the command's)."""
        return self.sub_categories.get(sub, self.categories)

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
) -> Callable[[Handler], Handler]:
    """Register a handler. ``primary``: served by the primary only (default: when it has keys);
    ``queued``: queued inside MULTI (False for the commands that act at once: EXEC, DISCARD...);
    ``key_access``: what an ACL key pattern must allow on its keys, as Redis' key specs say
    ("R" reads the value, "W" writes it, "RW" both, "" only looks at whether it exists; default:
    "R" for a readonly command, "RW" otherwise); ``sub_categories``: subcommands whose ACL
    categories differ from the command's (CLIENT KILL is @admin, CLIENT ID is not), so that
    ``+@category``/``-@category`` grant or take them one by one, as in Redis."""

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
    from ..errors import REFUSAL_REASONS, REFUSED, CommandError

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
    from ..errors import UNKNOWN_SUBCOMMAND, CommandError, wrong_arity

    sub = args[1].lower()
    if sub == b"help":
        return sub
    for sub_name, arity, _ in REGISTRY[name].subcommands:
        if sub_name.encode() == sub:
            if not (len(args) == arity if arity > 0 else len(args) >= -arity):
                raise wrong_arity(f"{name}|{sub_name}")
            return sub
    raise CommandError(UNKNOWN_SUBCOMMAND.format(args[1].decode("utf-8", "replace"), name.upper()))
