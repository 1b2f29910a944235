"""ACL: users and permissions in Redis' own syntax (the rules and their meaning: ``march.auth``).

``ACL SETUSER``, ``DELUSER``, ``GETUSER``, ``LIST``, ``USERS``, ``WHOAMI``, ``CAT``, ``LOG``,
``DRYRUN``, ``GENPASS``, ``LOAD``, ``SAVE``, ``HELP``, with Redis' replies and error texts.

Users live in the store beside the sequences, and the store's copy is the one that counts
(``march.users``): ``SETUSER``/``DELUSER``/``LOAD`` read the stored user with its revision, apply
the rules to it and write it back with a compare on that revision (retrying a lost race), so a
change made at once on another node is never lost and a revoked password never comes back. A
change is durable before it is reported, and then holds here at once and on every other node
within the watch delay. ``ACL SETUSER`` is all or nothing (an invalid rule changes nothing).
Deleting a user closes its connections, as in Redis. ``LOAD``/``SAVE`` need ``aclfile``: ``LOAD``
makes the stored users exactly the file's, ``SAVE`` writes the current ones to it. Replies and
work that grow with the number of users (``LIST``, ``USERS``, ``SAVE``, ``LOAD``) are made
``LIST_SLICE`` users per event-loop step.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import auth, errors
from ..errors import CommandError
from .args import parse_int
from .registry import REGISTRY, Secrets, check_subcommand, command, lookup

if TYPE_CHECKING:
    from ..client import Client

LIST_SLICE = 500  # users described per event-loop step (~2 ms): ACL LIST of 10,000 users lets others run between

_SUBS = (
    ("setuser", -3, "Create or modify a user with the given rules."),
    ("deluser", -3, "Delete users (and close their connections)."),
    ("getuser", 3, "A user's flags, passwords (hashed), commands, keys and channels."),
    ("list", 2, "Every user, as ACL rules."),
    ("users", 2, "Every user name."),
    ("whoami", 2, "The user of this connection."),
    ("cat", -2, "The categories, or the commands of one."),
    ("log", -2, "Recent denials: ACL LOG [count | RESET]."),
    ("dryrun", -4, "Whether a user may run a command: ACL DRYRUN user command [arg ...]."),
    ("genpass", -2, "A random password: ACL GENPASS [bits]."),
    ("load", 2, "Make the stored users exactly those of the aclfile."),
    ("save", 2, "Write the users to the aclfile."),
)


@command(
    "acl",
    -2,
    ("admin", "noscript", "loading", "stale"),
    ("@admin", "@slow", "@dangerous"),
    summary="ACL SETUSER/DELUSER/GETUSER/LIST/USERS/WHOAMI/CAT/LOG/DRYRUN/GENPASS/LOAD/SAVE: users and permissions.",
    group="server",
    subcommands=_SUBS,
    # As in Redis: who am I, the categories and a random password are for everyone; the rest is admin.
    sub_categories={sub: ("@slow",) for sub in ("whoami", "cat", "genpass", "help")},
    # SETUSER: every argument, as Redis (a rule may hold a password anywhere: >pw, #hash, (>pw ~k));
    # DRYRUN: the secrets of the command it carries (ACL DRYRUN u AUTH pw)
    secrets={"setuser": Secrets(start=2, rest=True), "dryrun": Secrets(command=3)},
)
def acl(client: Client, args: list[bytes]) -> Any:
    sub = check_subcommand("acl", args)
    users = client.app.users
    if sub == b"help":
        return [b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"] + [
            f"{name.upper()}: {text}".encode() for name, _, text in _SUBS
        ]
    if sub == b"setuser":
        name = _username(args[2])
        rules = [a.decode("utf-8", "surrogateescape") for a in args[3:]]
        if any(r.startswith("(") for r in rules):
            raise CommandError(errors.ACL_SELECTORS)
        return _setuser(client, name, rules)
    if sub == b"deluser":
        names = [_username(a) for a in args[2:]]
        if auth.DEFAULT in names:
            raise CommandError(errors.ACL_DELETE_DEFAULT)
        return client.app.node.shared_users.delete(names)
    if sub == b"getuser":
        user = users.get(args[2].decode("utf-8", "surrogateescape"))
        if user is None:
            return None
        return {
            b"flags": [b"on" if user.enabled else b"off", *([b"nopass"] if user.nopass else [])],
            b"passwords": [h.encode() for h in user.passwords],
            b"commands": user.commands_text().encode(),
            b"keys": user.keys_text().encode(),
            b"channels": user.channels.encode(),
            b"selectors": [],
        }
    if sub == b"list":
        return _sliced(users, lambda u: f"user {u.name} {u.describe()}".encode())
    if sub == b"users":
        return _sliced(users, lambda u: u.name.encode())
    if sub == b"whoami":
        return client.user.name.encode()
    if sub == b"cat":
        if len(args) == 2:
            return [c.encode() for c in auth.CATEGORIES]
        if len(args) != 3:
            raise errors.wrong_arity("acl|cat")
        category = args[2].decode("utf-8", "replace").lower()
        if category not in auth.CATEGORIES:
            raise CommandError(errors.ACL_UNKNOWN_CATEGORY.format(category))
        out: list[bytes] = []
        for name, spec in REGISTRY.items():
            if spec.sub_categories:
                out += [
                    f"{name}|{s}".encode() for s, _, _ in spec.subcommands if "@" + category in spec.categories_of(s)
                ]
            elif "@" + category in spec.categories:
                out.append(name.encode())
        return out
    if sub == b"log":
        return _log(client, args)
    if sub == b"dryrun":
        return _dryrun(client, args)
    if sub == b"genpass":
        bits = parse_int(args[2]) if len(args) > 2 else 256
        if not 0 < bits <= 4096:
            raise CommandError(errors.ACL_GENPASS_BITS)
        return os.urandom((bits + 7) // 8).hex()[: (bits + 3) // 4].encode()
    if sub == b"load":
        return _load(client)
    return _save(client)


def _username(raw: bytes) -> str:
    name = raw.decode("utf-8", "surrogateescape")
    if not name or any(c in name for c in " \0\r\n"):
        raise CommandError(errors.ACL_BAD_USERNAME)
    return name


async def _setuser(client: Client, name: str, rules: list[str]) -> str:
    await client.app.node.shared_users.set_user(name, rules)
    return "OK"


async def _sliced(users: auth.Users, line: Callable[[auth.User], bytes]) -> list[bytes]:
    """``line(user)`` for every user by name, ``LIST_SLICE`` users per loop step."""
    names = list(users.names())
    out: list[bytes] = []
    for i in range(0, len(names), LIST_SLICE):
        if i:
            await asyncio.sleep(0)
        out += [line(u) for n in names[i : i + LIST_SLICE] if (u := users.get(n)) is not None]
    return out


def _log(client: Client, args: list[bytes]) -> Any:
    log = client.app.acl_log
    if len(args) > 3:
        raise errors.wrong_arity("acl|log")
    count = len(log.entries)
    if len(args) == 3:
        if args[2].lower() == b"reset":
            log.reset()
            return "OK"
        count = parse_int(args[2], errors.ACL_LOG_COUNT)
        if count < 0:
            raise CommandError(errors.ACL_LOG_COUNT)
    return [e.fields() for e in log.entries[:count]]


def _dryrun(client: Client, args: list[bytes]) -> Any:
    name = args[2].decode("utf-8", "surrogateescape")
    user = client.app.users.get(name)
    if user is None:
        raise CommandError(errors.ACL_USER_NOT_FOUND.format(name))
    spec = lookup(args[3])
    if spec is None:
        raise CommandError(errors.ACL_COMMAND_NOT_FOUND.format(args[3].decode("utf-8", "replace")))
    command_args = args[3:]
    if not spec.arity_ok(len(command_args)):
        raise errors.wrong_arity(spec.name)
    denied = user.denial(spec, command_args)
    if denied is None:
        return "OK"
    reason, obj = denied
    return (errors.DRYRUN_COMMAND if reason == "command" else errors.DRYRUN_KEY).format(obj).encode()


def _aclfile(client: Client) -> Path:
    path = client.app.config.aclfile
    if not path:
        raise CommandError(errors.ACL_NO_FILE)
    return Path(path)


def _load(client: Client) -> Any:
    path = _aclfile(client)
    return _load_file(client, path)


async def _load_file(client: Client, path: Path) -> str:
    shared = client.app.node.shared_users
    try:
        text = await asyncio.to_thread(path.read_text)
        parsed = auth.parse_acl_file(text)
        described: dict[str, str] = {}
        names = list(parsed)
        for i in range(0, len(names), LIST_SLICE):  # checking 10,000 users takes a while: in slices
            if i:
                await asyncio.sleep(0)
            described |= shared.normalize({n: parsed[n] for n in names[i : i + LIST_SLICE]})
    except (OSError, ValueError, CommandError) as exc:
        raise CommandError(errors.ACL_FILE.format(getattr(exc, "message", None) or exc)) from None
    await shared.load(described)
    return "OK"


def _save(client: Client) -> Any:
    return _save_file(client, _aclfile(client))


async def _save_file(client: Client, path: Path) -> str:
    lines = await _sliced(client.app.users, lambda u: f"user {u.name} {u.describe()}\n".encode())
    try:
        await asyncio.to_thread(_write_atomically, path, b"".join(lines))
    except OSError as exc:
        raise CommandError(errors.ACL_FILE.format(exc)) from None
    return "OK"


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
