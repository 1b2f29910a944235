"""ACL: users and permissions in Redis' own syntax (the rules and their meaning: ``march.access.rules``).

``ACL SETUSER``, ``DELUSER``, ``GETUSER``, ``LIST``, ``USERS``, ``WHOAMI``, ``CAT``, ``LOG``,
``DRYRUN``, ``GENPASS``, ``LOAD``, ``SAVE``, ``HELP``, with Redis' replies and error texts.

Users live in the store beside the sequences, and the store's copy is the one that counts
(``march.access.stored``): ``SETUSER``/``DELUSER``/``LOAD`` read the stored user with its revision, apply
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

from march import errors
from march.access.rules import CATEGORIES, DEFAULT, User, check_username
from march.access.users import Users, parse_acl_file
from march.commands.args import Args
from march.commands.table import COMMANDS, Secrets, Subcommand, container, lookup
from march.errors import CommandError

if TYPE_CHECKING:
    from march.client import Client

LIST_SLICE = 500  # users described per event-loop step (~2 ms): ACL LIST of 10,000 users lets others run between


def _acl_syntax(args: list[bytes]) -> CommandError:
    """Redis' reply to ACL CAT/LOG/GENPASS with one argument too many (their arity allows any number)."""
    return CommandError(errors.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), "ACL"))


def _acl_setuser(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    name = _username(cursor.next())
    rules = [a.decode("utf-8", "surrogateescape") for a in cursor.rest()]
    if any(r.startswith("(") for r in rules):
        raise CommandError(errors.ACL_SELECTORS)
    return _setuser(client, name, rules)


def _acl_deluser(client: Client, args: list[bytes]) -> Any:
    names = [_username(a) for a in Args(args, 2).rest()]
    if DEFAULT in names:
        raise CommandError(errors.ACL_DELETE_DEFAULT)
    return client.app.node.shared_users.delete(names)


def _acl_getuser(client: Client, args: list[bytes]) -> Any:
    user = client.app.users.get(Args(args, 2).name())
    if user is None:
        return None
    return {
        b"flags": [b"on" if user.enabled else b"off", *([b"nopass"] if user.nopass else [])],
        b"passwords": [h.encode() for h in user.passwords],
        b"commands": user.commands_text().encode(),
        b"keys": user.keys_text().encode(),
        b"channels": user.channels_text().encode("utf-8", "surrogateescape"),
        b"selectors": [],
    }


def _acl_list(client: Client, args: list[bytes]) -> Any:
    return _sliced(client.app.users, lambda u: f"user {u.name} {u.describe()}".encode())


def _acl_users(client: Client, args: list[bytes]) -> Any:
    return _sliced(client.app.users, lambda u: u.name.encode())


def _acl_whoami(client: Client, args: list[bytes]) -> Any:
    return client.user.name.encode()


def _acl_cat(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    if not cursor.more():
        return [c.encode() for c in CATEGORIES]
    given = cursor.text()
    category = given.lower()
    cursor.finish(_acl_syntax(args).message)
    if category not in CATEGORIES:
        raise CommandError(errors.ACL_UNKNOWN_CATEGORY.format(given))  # as given: Redis keeps its case
    out: list[bytes] = []
    for name, spec in COMMANDS.items():
        if spec.sub_categories:
            out += [
                f"{name}|{s.name}".encode() for s in spec.subcommands if "@" + category in spec.categories_of(s.name)
            ]
        elif "@" + category in spec.categories:
            out.append(name.encode())
    return out


def _acl_genpass(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    bits = cursor.integer() if cursor.more() else 256
    cursor.finish(_acl_syntax(args).message)
    if not 0 < bits <= 4096:
        raise CommandError(errors.ACL_GENPASS_BITS)
    return os.urandom((bits + 7) // 8).hex()[: (bits + 3) // 4].encode()


def _acl_load(client: Client, args: list[bytes]) -> Any:
    return _load_file(client, _aclfile(client))


def _acl_save(client: Client, args: list[bytes]) -> Any:
    return _save_file(client, _aclfile(client))


def _username(raw: bytes) -> str:
    return check_username(raw.decode("utf-8", "surrogateescape"))


async def _setuser(client: Client, name: str, rules: list[str]) -> str:
    await client.app.node.shared_users.set_user(name, rules)
    return "OK"


async def _sliced(users: Users, line: Callable[[User], bytes]) -> list[bytes]:
    """``line(user)`` for every user by name, ``LIST_SLICE`` users per loop step."""
    names = list(users.names())
    out: list[bytes] = []
    for i in range(0, len(names), LIST_SLICE):
        if i:
            await asyncio.sleep(0)
        out += [line(u) for n in names[i : i + LIST_SLICE] if (u := users.get(n)) is not None]
    return out


LOG_COUNT = 10  # entries ACL LOG shows without a count: Redis' default


def _log(client: Client, args: list[bytes]) -> Any:
    """ACL LOG [count | RESET], as Redis 7.0: the newest ``LOG_COUNT`` by default, a count below 0 shows nothing."""
    log = client.app.acl_log
    cursor = Args(args, 2)
    count = LOG_COUNT
    if cursor.flag(b"reset"):
        cursor.finish(_acl_syntax(args).message)
        log.reset()
        return "OK"
    if cursor.more():
        count = max(0, cursor.integer())
    cursor.finish(_acl_syntax(args).message)
    return [e.fields() for e in log.entries[:count]]


def _dryrun(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    name = cursor.name()
    user = client.app.users.get(name)
    if user is None:
        raise CommandError(errors.ACL_USER_NOT_FOUND.format(name))
    command_args = cursor.rest()
    spec = lookup(command_args[0])
    if spec is None:
        raise CommandError(errors.ACL_COMMAND_NOT_FOUND.format(command_args[0].decode("utf-8", "replace")))
    if not spec.arity_ok(len(command_args)):
        raise errors.wrong_arity(spec.name)
    denied = user.denial(spec, command_args)
    if denied is None:
        return "OK"
    reason, obj = denied
    return _DRYRUN[reason].format(obj).encode()


_DRYRUN = {"command": errors.DRYRUN_COMMAND, "key": errors.DRYRUN_KEY, "channel": errors.DRYRUN_CHANNEL}


def _aclfile(client: Client) -> Path:
    path = client.app.config.aclfile
    if not path:
        raise CommandError(errors.ACL_NO_FILE)
    return Path(path)


async def _load_file(client: Client, path: Path) -> str:
    shared = client.app.node.shared_users
    try:
        text = await asyncio.to_thread(path.read_text)
        parsed = parse_acl_file(text)
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


_ANYONE = ("@slow",)  # as in Redis: who am I, the categories and a random password are for everyone

container(
    "acl",
    ("admin", "noscript", "loading", "stale"),
    ("@admin", "@slow", "@dangerous"),
    (
        # SETUSER: every argument is secret, as Redis (a rule may hold a password anywhere: >pw, #hash, (>pw ~k))
        Subcommand(
            "setuser",
            -3,
            "Create or modify a user with the given rules.",
            _acl_setuser,
            "SETUSER <username> <attribute> [<attribute> ...]",
            secrets=Secrets(start=2, rest=True),
        ),
        Subcommand(
            "deluser",
            -3,
            "Delete users (and close their connections).",
            _acl_deluser,
            "DELUSER <username> [<username> ...]",
        ),
        Subcommand(
            "getuser",
            3,
            "A user's flags, passwords (hashed), commands, keys and channels.",
            _acl_getuser,
            "GETUSER <username>",
        ),
        Subcommand("list", 2, "Every user, as ACL rules.", _acl_list),
        Subcommand("users", 2, "Every user name.", _acl_users),
        Subcommand("whoami", 2, "The user of this connection.", _acl_whoami, categories=_ANYONE),
        Subcommand(
            "cat", -2, "The categories, or the commands of one.", _acl_cat, "CAT [<category>]", categories=_ANYONE
        ),
        Subcommand("log", -2, "Recent denials: ACL LOG [count | RESET].", _log, "LOG [<count> | RESET]"),
        # DRYRUN: the secrets of the command it carries (ACL DRYRUN u AUTH pw)
        Subcommand(
            "dryrun",
            -4,
            "Whether a user may run a command: ACL DRYRUN user command [arg ...].",
            _dryrun,
            "DRYRUN <username> <command> [<arg> ...]",
            secrets=Secrets(command=3),
        ),
        Subcommand(
            "genpass",
            -2,
            "A random password: ACL GENPASS [bits].",
            _acl_genpass,
            "GENPASS [<bits>]",
            categories=_ANYONE,
        ),
        Subcommand("load", 2, "Make the stored users exactly those of the aclfile.", _acl_load),
        Subcommand("save", 2, "Write the users to the aclfile.", _acl_save),
    ),
    summary="ACL SETUSER/DELUSER/GETUSER/LIST/USERS/WHOAMI/CAT/LOG/DRYRUN/GENPASS/LOAD/SAVE: users and permissions.",
    group="server",
    help_categories=_ANYONE,
)
