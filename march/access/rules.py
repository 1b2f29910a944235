"""Users and permissions, in Redis' ACL syntax: users, rules, password hashing, checks, the ACL log.

A ``User`` is built by applying ``ACL SETUSER`` rules in order, exactly as Redis reads them:
``on``/``off``, ``>pass``/``<pass``, ``#hash``/``!hash``, ``nopass``, ``resetpass``, ``~pattern``,
``%R~pattern``/``%W~pattern``/``%RW~pattern``, ``allkeys``, ``resetkeys``, ``+cmd``, ``-cmd``,
``+cmd|sub``, ``-cmd|sub``, ``+@category``, ``-@category``, ``allcommands``, ``nocommands``,
``&pattern``/``allchannels``/``resetchannels`` and ``reset``. Passwords are kept only as SHA-256
(hex), as Redis keeps them, and compared in constant time.

Redis 7.0's details, each checked against a real redis-server (tests/access/test_acl_vs_redis.py): a key
pattern given twice is kept once, its permissions joined (``%R~foo %W~foo`` reads back ``~foo``);
a key pattern after ``allkeys`` (a channel pattern after ``allchannels``) is an error; ``+cmd|arg``
on a command without subcommands allows that command with that first argument only (``+select|0``),
and on a subcommand (``+config|get|appendonly``) is Redis' "not supported" error.

**Channels** (Redis 7): ``&pattern`` lets the user SUBSCRIBE to the channels the glob matches and
PSUBSCRIBE to that very pattern (compared as a string, not matched); ``allchannels`` (``&*``) to
any. A user created by ``ACL SETUSER`` (or ``reset``) starts with the channels that
``acl-pubsub-default`` says (``resetchannels``: none, Redis 7's default); ``default`` has ``&*``.

**Permissions that fit a sequencer** (each grantable on its own, see the README):

- drawing IDs (``INCR``, ``INCRBY``: ``@write``) and reading watermarks (``GET``...: ``@read``), on
  the keys the user's patterns allow (a write needs a write pattern, a read a read pattern);
- creating sequences: ``SEQ.CREATE`` (category ``@create``); an ``INCR`` or ``SET`` that would
  create an unknown key needs it too (``may_create``);
- raising floors: ``SET`` (category ``@floor``); ``SEQ.CREATE ... START/FLOOR`` needs it too;
- administering: ``FAILOVER``, ``SHUTDOWN``, ``CONFIG``, ``ACL``, ``DEBUG`` (``@admin``).

Defaults, as in Redis: the ``default`` user may do everything (``on nopass ~* &* +@all``) until a
password is set (``requirepass``, or ``ACL SETUSER default ...``); a new user starts with
nothing (``off``, no keys, no commands) and gets only what its rules grant.

A user's ``describe()`` is its rules in a form that, applied to a fresh user, gives the same
user: that is what ``ACL LIST`` shows and what the store keeps.

**A stored record this version cannot read fails closed** (``Users.take``): the user is installed
*off*, with no password, no keys and no commands (what a new user starts with), never left as it
was and never given built-in rules. For ``default`` that means no connection is authenticated
without ``AUTH`` as another user (``NOAUTH``), where the built-in ``default`` would have let
everyone in. The node starts and serves; ``unreadable`` says which users are so (``march.access.stored``
logs them), and writing the user again (``ACL SETUSER``, which starts from nothing for such a
record, ``march restore`` with a valid record, ``ACL LOAD``) repairs it. This module knows the command
registry only through the values it is handed (``AclCommand``: what a rule reads of a registered
command); it imports no command and never touches the store.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from march import errors
from march.errors import CommandError
from march.glob import Glob, compile_glob
from march.stats.diagnostics import MAX_STRING, capped

DEFAULT = "default"
DEFAULT_RULES = "on nopass ~* &* +@all"  # the default user before any password: everything, as in Redis
# The categories ACL CAT lists: Redis' own (clients expect them) and March's own: create, floor,
# worker, seqadmin (a sequence's settings: SEQ.ALTER) and app (what client libraries send besides
# the data commands: handshake, MULTI/EXEC, CLUSTER topology, COMMAND; see the README).
CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap", "hyperloglog",
    "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous", "connection",
    "transaction", "scripting", "create", "floor", "worker", "seqadmin", "app",
)  # fmt: skip
_GONE_KEPT = 4096  # deletions remembered until the watch passes them: a late write-back of one is refused
LOG_SIZE = 128  # ACL LOG entries kept (Redis' acllog-max-len default)
LOG_GROUP_SECONDS = 60  # a repeat of the same denial within this long counts in the same entry


class AclSubcommand(Protocol):
    """What ACL rules read of a container's subcommand (``commands.table.Subcommand`` is one)."""

    @property
    def name(self) -> str: ...


class AclCommand(Protocol):
    """What ACL rules and checks read of a registered command (``commands.table.CommandSpec`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def categories(self) -> tuple[str, ...]: ...
    @property
    def subcommands(self) -> tuple[AclSubcommand, ...]: ...
    @property
    def sub_categories(self) -> Mapping[str, tuple[str, ...]]: ...
    @property
    def key_access(self) -> str: ...
    @property
    def channels(self) -> str: ...  # its arguments after the name: "channel" (SUBSCRIBE), "pattern" (PSUBSCRIBE) or ""
    def categories_of(self, sub: str) -> tuple[str, ...]: ...
    def key_positions(self, n_args: int) -> list[int]: ...


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def _is_hash(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


@dataclass
class _KeyRule:
    pattern: bytes
    read: bool
    write: bool

    def text(self) -> str:
        prefix = "~" if self.read and self.write else "%R~" if self.read else "%W~"
        return prefix + self.pattern.decode("utf-8", "surrogateescape")


_BLANKS = frozenset(" \t\n\v\f\r\0")  # C's isspace() in the C locale, and NUL


def _has_spaces(text: str) -> bool:
    """Redis' ``ACLStringHasSpaces``: a pattern with a blank or a NUL is a syntax error."""
    return not _BLANKS.isdisjoint(text)


class User:
    """One ACL user. Mutated in place by ``apply`` (connected clients see the change at once)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.passwords: list[str] = []  # sha256 hex, in the order they were added
        self.keys: list[_KeyRule] = []
        self._matchers: list[tuple[Glob, bool, bool]] = []
        self.all_keys = False  # every key, read and write (~*, allkeys, or a %RW~* pattern)
        self._allkeys = False  # the allkeys flag itself (~* / allkeys): a pattern after it is an error
        self.all_channels = False  # &* / allchannels: every channel and pattern
        self.channels: list[bytes] = []  # &pattern, in the order given (without allchannels)
        self._channel_globs: list[Glob] = []  # compiled, for SUBSCRIBE's channel names
        self.all_commands = False  # +@all: every command, present and future
        self.allowed: set[str] = set()  # command names allowed whole
        self.sub_allowed: set[str] = set()  # "cmd|sub" allowed although cmd is not
        self.sub_denied: set[str] = set()  # "cmd|sub" denied although cmd is
        self.first_args: dict[str, list[str]] = {}  # +select|0: a command allowed with these first arguments only
        self.command_rules: list[str] = ["-@all"]  # as applied, for describe()
        self.unrestricted = False  # every command on every key: the server's fast path needs no check

    # --- rules ---------------------------------------------------------------------------------

    def apply(self, rules: Iterable[str], table: Mapping[str, AclCommand], all_channels: bool = False) -> None:
        """Apply ``rules`` in order; on an invalid one nothing changes (CommandError, Redis' text).
        ``all_channels``: what ``reset`` grants of channels (``acl-pubsub-default allchannels``)."""
        trial = self.copy()
        for rule in rules:
            trial._apply_one(rule, table, all_channels)
        self.__dict__.update(trial.__dict__)

    def copy(self) -> User:
        other = User(self.name)
        other.__dict__.update(
            {
                **self.__dict__,
                "passwords": list(self.passwords),
                "keys": [_KeyRule(k.pattern, k.read, k.write) for k in self.keys],
                "_matchers": list(self._matchers),
                "channels": list(self.channels),
                "_channel_globs": list(self._channel_globs),
                "allowed": set(self.allowed),
                "sub_allowed": set(self.sub_allowed),
                "sub_denied": set(self.sub_denied),
                "first_args": {name: list(args) for name, args in self.first_args.items()},
                "command_rules": list(self.command_rules),
            }
        )
        return other

    def _apply_one(self, rule: str, table: Mapping[str, AclCommand], all_channels: bool = False) -> None:
        low = rule.lower()
        if low == "on":
            self.enabled = True
        elif low == "off":
            self.enabled = False
        elif low == "nopass":
            self.nopass = True
            self.passwords = []
        elif low == "resetpass":
            self.nopass = False
            self.passwords = []
        elif rule.startswith(">"):
            self._add_hash(hash_password(rule[1:].encode("utf-8", "surrogateescape")))
        elif rule.startswith("<"):
            digest = hash_password(rule[1:].encode("utf-8", "surrogateescape"))
            if digest not in self.passwords:
                raise _modifier(rule, errors.ACL_NO_SUCH_PASSWORD)
            self.passwords.remove(digest)
        elif rule.startswith("#"):
            if not _is_hash(rule[1:]):
                raise _modifier(rule, errors.ACL_BAD_HASH)
            self._add_hash(rule[1:])
        elif rule.startswith("!"):
            if not _is_hash(rule[1:]):
                raise _modifier(rule, errors.ACL_BAD_HASH)
            if rule[1:] not in self.passwords:
                raise _modifier(rule, errors.ACL_NO_SUCH_PASSWORD)
            self.passwords.remove(rule[1:])
        elif low == "allkeys" or rule == "~*":
            self.keys = [_KeyRule(b"*", True, True)]
            self._allkeys = True
            self._set_keys()
        elif low == "resetkeys":
            self.keys = []
            self._allkeys = False
            self._set_keys()
        elif rule.startswith("~") or rule.startswith("%"):
            self._add_key_rule(rule)
        elif low in ("allchannels", "&*"):
            self._set_channels(True, [])
        elif low == "resetchannels":
            self._set_channels(False, [])
        elif rule.startswith("&"):
            self._add_channel_rule(rule)
        elif low in ("allcommands", "+@all"):
            self.all_commands = True
            self.allowed = set(table)
            self.sub_allowed.clear()
            self.sub_denied.clear()
            self.first_args.clear()
            self.command_rules = ["+@all"]
        elif low in ("nocommands", "-@all"):
            self._no_commands()
        elif rule[:1] in "+-" and len(rule) > 1:
            self._command_rule(rule, table)
        elif low == "reset":
            channels = ["resetchannels", "allchannels"] if all_channels else ["resetchannels"]
            for step in ("resetpass", "resetkeys", *channels, "nocommands", "off"):
                self._apply_one(step, table)
        else:
            raise _modifier(rule, errors.ACL_SYNTAX)
        self.unrestricted = self.all_commands and not self.sub_denied and self.all_keys

    def _add_hash(self, digest: str) -> None:
        self.nopass = False
        if digest not in self.passwords:
            self.passwords.append(digest)

    def _add_key_rule(self, rule: str) -> None:
        """``~pattern`` or ``%R~``/``%W~``/``%RW~pattern``, as Redis 7.0 reads it: after ``allkeys`` an
        error; a pattern already there gets the new permissions too (one pattern, read back once)."""
        if self._allkeys:
            raise _modifier(rule, errors.ACL_AFTER_ALLKEYS)
        if rule.startswith("~"):
            read = write = True
            pattern = rule[1:]
        else:
            flags, sep, pattern = rule[1:].partition("~")
            upper = flags.upper()
            if not sep or not flags or any(f not in "RW" for f in upper) or len(set(upper)) != len(upper):
                raise _modifier(rule, errors.ACL_SYNTAX)
            read, write = "R" in upper, "W" in upper
        if _has_spaces(pattern):
            raise _modifier(rule, errors.ACL_SYNTAX)
        raw = pattern.encode("utf-8", "surrogateescape")
        for k in self.keys:
            if k.pattern == raw:
                k.read, k.write = k.read or read, k.write or write
                break
        else:
            self.keys.append(_KeyRule(raw, read, write))
        self._set_keys()

    def _set_keys(self) -> None:
        self.all_keys = self._allkeys or any(k.pattern == b"*" and k.read and k.write for k in self.keys)
        self._matchers = [(compile_glob(k.pattern), k.read, k.write) for k in self.keys]

    def _add_channel_rule(self, rule: str) -> None:
        """``&pattern``, as Redis 7.0 reads it: after ``allchannels`` an error; a pattern already there is kept once."""
        if self.all_channels:
            raise _modifier(rule, errors.ACL_AFTER_ALLCHANNELS)
        if _has_spaces(rule[1:]):
            raise _modifier(rule, errors.ACL_SYNTAX)
        pattern = rule[1:].encode("utf-8", "surrogateescape")
        if pattern not in self.channels:
            self._set_channels(False, [*self.channels, pattern])

    def _set_channels(self, every: bool, patterns: list[bytes]) -> None:
        self.all_channels = every
        self.channels = patterns
        self._channel_globs = [compile_glob(p) for p in patterns]

    def _no_commands(self) -> None:
        self.all_commands = False
        self.allowed.clear()
        self.sub_allowed.clear()
        self.sub_denied.clear()
        self.first_args.clear()
        self.command_rules = ["-@all"]

    def _command_rule(self, given: str, table: Mapping[str, AclCommand]) -> None:
        rule = given.lower()
        allow = rule[0] == "+"
        what = rule[1:]
        if what.startswith("@"):
            category = "@" + what[1:]
            if what[1:] not in CATEGORIES:
                raise _modifier(given, errors.ACL_UNKNOWN_COMMAND)
            for name, each in table.items():
                if each.sub_categories:  # its subcommands' categories differ: one by one
                    for row in each.subcommands:
                        if category in each.categories_of(row.name):
                            self._set_subcommand(name, row.name, allow)
                elif category in each.categories:
                    self._set_command(name, allow)
        elif allow and "|" in what:
            piped = self._allow_piped(given, table)
            if piped is None:
                return  # a first argument allowed already: kept once, as Redis
            rule = piped
        else:
            found, sub = _lookup(what, table)
            if found is None:
                raise _modifier(given, errors.ACL_UNKNOWN_COMMAND)
            if sub:
                self._set_subcommand(found, sub, allow)
            else:
                self._set_command(found, allow)
        if not allow:
            self.all_commands = False
        self.command_rules.append(rule)

    def _allow_piped(self, given: str, table: Mapping[str, AclCommand]) -> str | None:
        """``+cmd|sub`` or ``+cmd|first-arg``, as Redis 7.0 reads it (split at the last ``|``): a
        subcommand, or a first argument of a command without subcommands (``+select|0``); a first
        argument of a subcommand is refused. The rule as ``describe()`` keeps it (None: nothing new)."""
        head, _, arg = given[1:].rpartition("|")
        name, sub = _lookup(head.lower(), table)
        if name is None:
            raise _modifier(given, errors.ACL_UNKNOWN_COMMAND)
        if sub:
            raise _modifier(given, errors.ACL_FIRST_ARG_OF_SUBCOMMAND)
        if not arg:
            raise _modifier(given, errors.ACL_SYNTAX)
        if table[name].subcommands:
            _, sub = _lookup(f"{name}|{arg.lower()}", table)
            if not sub:
                raise _modifier(given, errors.ACL_UNKNOWN_COMMAND)
            self._set_subcommand(name, sub, True)
            return f"+{name}|{sub}"
        known = self.first_args.setdefault(name, [])
        if arg.lower() in (a.lower() for a in known):
            return None
        known.append(arg)
        return f"+{name}|{arg}"

    def _set_subcommand(self, name: str, sub: str, allow: bool) -> None:
        full = f"{name}|{sub}"
        if allow:
            self.sub_denied.discard(full)
            if name not in self.allowed:
                self.sub_allowed.add(full)
        else:
            self.sub_allowed.discard(full)
            if name in self.allowed:
                self.sub_denied.add(full)

    def _set_command(self, name: str, allow: bool) -> None:
        self.sub_allowed = {s for s in self.sub_allowed if not s.startswith(name + "|")}
        self.sub_denied = {s for s in self.sub_denied if not s.startswith(name + "|")}
        self.first_args.pop(name, None)
        if allow:
            self.allowed.add(name)
        else:
            self.allowed.discard(name)

    # --- reading -------------------------------------------------------------------------------

    def describe(self) -> str:
        """The rules that rebuild this user (ACL LIST without ``user <name>``), in Redis 7.0's order:
        on/off, passwords, keys, channels (``&*``, or ``resetchannels`` and each ``&pattern``), commands."""
        parts = ["on" if self.enabled else "off"]
        parts += ["nopass"] if self.nopass else [f"#{h}" for h in self.passwords]
        parts += [k.text() for k in self.keys]
        parts += ["&*"] if self.all_channels else ["resetchannels", *self._channel_texts()]
        parts += self.command_rules
        return " ".join(parts)

    def commands_text(self) -> str:
        return " ".join(self.command_rules)

    def keys_text(self) -> str:
        return " ".join(k.text() for k in self.keys)

    def channels_text(self) -> str:
        """ACL GETUSER's ``channels``: ``&*``, or each ``&pattern`` (empty: none), as Redis 7.0."""
        return "&*" if self.all_channels else " ".join(self._channel_texts())

    def _channel_texts(self) -> list[str]:
        return ["&" + p.decode("utf-8", "surrogateescape") for p in self.channels]

    def check_password(self, password: bytes) -> bool:
        """True if ``password`` is one of the user's (any password with ``nopass``); constant time."""
        if self.nopass:
            return True
        digest = hash_password(password)
        found = False
        for h in self.passwords:
            found |= hmac.compare_digest(h, digest)
        return found

    def may_run(self, name: str, sub: str = "") -> bool:
        if sub:
            full = f"{name}|{sub}"
            if full in self.sub_denied:
                return False
            if full in self.sub_allowed:
                return True
        return self.all_commands or name in self.allowed

    def _first_arg_allowed(self, name: str, args: list[bytes]) -> bool:
        """``+select|0``: the command is allowed with this first argument (compared in any case, as Redis)."""
        allowed = self.first_args.get(name)
        if not allowed or len(args) < 2:
            return False
        first = args[1].decode("utf-8", "surrogateescape").lower()
        return any(a.lower() == first for a in allowed)

    def may_access(self, key: bytes, write: bool) -> bool:
        if self.all_keys:
            return True
        return any((w if write else r) and glob.match(key) for glob, r, w in self._matchers)

    def may_listen(self, name: bytes, pattern: bool) -> bool:
        """Whether this user may SUBSCRIBE to channel ``name`` (one of its ``&`` patterns matches it)
        or PSUBSCRIBE to pattern ``name`` (it is one of them, as a string), as Redis 7.0 checks."""
        if self.all_channels:
            return True
        if pattern:
            return name in self.channels
        return any(glob.match(name) for glob in self._channel_globs)

    def denial(self, spec: AclCommand, args: list[bytes]) -> tuple[str, str] | None:
        """Why this user may not run ``args`` (reason "command", "key" or "channel", and the object),
        or None. Checked in Redis' order: the command, then its keys, then its channels."""
        sub = args[1].decode("utf-8", "replace").lower() if spec.subcommands and len(args) > 1 else ""
        if not self.may_run(spec.name, sub) and not self._first_arg_allowed(spec.name, args):
            return "command", f"{spec.name}|{sub}" if sub else spec.name
        if not self.all_keys:
            # As Redis' key specs: INCR reads and writes (RW), GET reads, SEQ.CREATE writes, EXISTS and
            # TYPE only look (any pattern that matches will do).
            access = spec.key_access
            for position in spec.key_positions(len(args)):
                key = args[position]
                readable, writable = self.may_access(key, write=False), self.may_access(key, write=True)
                ok = (
                    (readable or writable)
                    if not access
                    else ("R" not in access or readable) and ("W" not in access or writable)
                )
                if not ok:
                    return "key", key.decode("utf-8", "replace")
        if not self.all_channels and spec.channels:
            pattern = spec.channels == "pattern"
            for name in args[1:]:
                if not self.may_listen(name, pattern):
                    return "channel", name.decode("utf-8", "replace")
        return None

    def checked(self, spec: AclCommand) -> bool:
        """Whether a request to ``spec`` needs ``denial`` for this user: not for a user with every
        command on every key (the fast path), unless the command names channels it may not all use."""
        return not self.unrestricted or (bool(spec.channels) and not self.all_channels)


def _modifier(rule: str, why: str) -> CommandError:
    return CommandError(errors.ACL_MODIFIER.format(rule, why))


def check_username(name: str) -> str:
    """``name`` if ACL SETUSER accepts it as a user name (CommandError, Redis' text, if not)."""
    if not name or any(c in name for c in " \0\r\n"):
        raise CommandError(errors.ACL_BAD_USERNAME)
    return name


def _lookup(name: str, table: Mapping[str, AclCommand]) -> tuple[str | None, str]:
    """``cmd`` or ``cmd|sub`` (lower case) looked up strictly, as Redis' ``ACLLookupCommand``: the
    command and the subcommand ("" for none), or None if there is no such command or subcommand."""
    parts = name.split("|")
    spec = table.get(parts[0]) if len(parts) <= 2 else None
    if spec is None:
        return None, ""
    if len(parts) == 1:
        return parts[0], ""
    if parts[1] in {s.name for s in spec.subcommands}:
        return parts[0], parts[1]
    return None, ""


def split_rules(text: str) -> list[str]:
    return text.split()


# --- the users of a deployment ---------------------------------------------------------------------


class Users:
    """Every user by name; ``default`` always exists.

    Each installed user carries the store revision of the record it was built from (0: the
    built-in ``default``). ``take`` installs a record only if it is newer than what is known of
    that name, so records arriving out of order (a command's own write and the watch that
    reports it, a reload read page by page) never put an older state back. ``watched`` is how
    far the watch has delivered: every change at or below it is already here. A deletion is
    remembered (``_gone``, bounded) until the watch has passed it.
    """

    def __init__(self, table: Mapping[str, AclCommand], loaded: bool = True) -> None:
        self.table = table
        self.users: dict[str, User] = {}
        self.revisions: dict[str, int] = {}  # name -> revision of the stored record installed
        self._gone: OrderedDict[str, int] = OrderedDict()  # name -> revision of its deletion, newest last
        self.watched = 0
        self._names: list[str] | None = None  # sorted names (ACL LIST, USERS), rebuilt after a name comes or goes
        self.unreadable: dict[str, str] = {}  # users whose stored record this version cannot read -> why (they are off)
        self.loaded = loaded  # False until read from the store (a cluster node that started before etcd)
        self.reset_default()

    def reset_default(self) -> None:
        user = self.users.get(DEFAULT) or User(DEFAULT)
        user.apply(["reset", *DEFAULT_RULES.split()], self.table)
        self._put(user)

    def _put(self, user: User) -> None:
        if user.name not in self.users:
            self._names = None
        self.users[user.name] = user

    def get(self, name: str) -> User | None:
        return self.users.get(name)

    @property
    def default(self) -> User:
        return self.users[DEFAULT]

    def build(self, name: str, rules: str | None, all_channels: bool = False) -> User:
        """A user as stored (``rules``), or as a user that is not stored starts: nothing for a new
        one, the built-in rules for ``default``. Not installed; CommandError if unreadable (and
        ``stored`` for what a stored record that cannot be read stands for). ``all_channels``
        (``acl-pubsub-default allchannels``): a new user, and ``reset``, get every channel, as Redis
        creates users (stored rules always say their channels)."""
        user = User(name)
        if rules is not None:
            user.apply(["reset", *split_rules(rules)], self.table, all_channels)
        elif name == DEFAULT:
            user.apply(DEFAULT_RULES.split(), self.table)
        elif all_channels:
            user.apply(["allchannels"], self.table)
        return user

    def stored(self, name: str, rules: str | None) -> User:
        """The user a stored record stands for (``build``), and for a record that cannot be read a
        user with nothing, off (fails closed: never the built-in ``default``, never the old rules)."""
        try:
            return self.build(name, rules)
        except CommandError:
            return User(name)

    def check(self, described: dict[str, str]) -> None:
        """Raise CommandError if any of ``described`` (name -> rules) is invalid."""
        for name, rules in described.items():
            self.build(name, rules)

    def known(self, name: str) -> int:
        """The newest revision of ``name`` applied here (or passed by the watch)."""
        return max(self.revisions.get(name, 0), self._gone.get(name, 0), self.watched)

    def take(self, name: str, rules: str | None, revision: int) -> tuple[bool, User | None]:
        """Install the stored record of ``name`` (``rules`` None: deleted) if it is newer than what
        is known here. Returns (changed here, the user removed). Updated in place: connections
        see the change at once. A record this version cannot read installs the user off, with
        nothing (``unreadable`` says why), never the user it was nor the built-in ``default``."""
        if revision <= self.known(name):
            return False, None
        self.unreadable.pop(name, None)
        if rules is None:
            self._gone[name] = revision
            self._gone.move_to_end(name)
            while len(self._gone) > _GONE_KEPT:
                self._gone.popitem(last=False)
            self.revisions.pop(name, None)
            return True, self.remove(name)
        self._gone.pop(name, None)
        self.revisions[name] = revision
        try:
            self.install(name, rules)
        except CommandError as exc:
            self.unreadable[name] = exc.message
            self.install(name, "reset")  # off, no password, no keys, no commands: closed
        return True, None

    def advance(self, revision: int) -> None:
        """The watch has delivered every change up to ``revision``."""
        if revision > self.watched:
            self.watched = revision
            while self._gone and next(iter(self._gone.values())) <= revision:
                self._gone.popitem(last=False)

    def missing(self, stored: set[str], revision: int) -> list[str]:
        """Users here that a read of the store at ``revision`` did not find, and that changed here
        at or before it: deleted in the store meanwhile (a reload removes them)."""
        return [n for n in self.users if n not in stored and self.revisions.get(n, 0) <= revision]

    def install(self, name: str, rules: str) -> User:
        """Make user ``name`` exactly ``rules`` (updated in place: its connections see it at once)."""
        user = self.users.get(name) or User(name)
        user.apply(["reset", *split_rules(rules)], self.table)
        self._put(user)
        return user

    def remove(self, name: str) -> User | None:
        """Delete user ``name`` (``default`` goes back to its defaults instead); the removed user."""
        if name == DEFAULT:
            self.reset_default()
            return None
        gone = self.users.pop(name, None)
        if gone is not None:
            self._names = None
        return gone

    def replace(self, described: dict[str, str]) -> list[User]:
        """Make the users exactly ``described`` (name -> rules), all at once (tests and tools; a
        server installs the store's records one by one with ``take``); the users removed."""
        self.loaded = True
        removed = [u for n in list(self.users) if n not in described and (u := self.remove(n)) is not None]
        if DEFAULT not in described:
            self.reset_default()
        for name, rules in described.items():
            try:
                self.install(name, rules)
            except CommandError:
                self.install(name, "reset")  # closed, as ``take`` installs a record it cannot read
        return removed

    def authenticate(self, name: str, password: bytes) -> User | None:
        user = self.users.get(name)
        if user is None or not user.enabled or not user.check_password(password):
            return None
        return user

    def names(self) -> list[str]:
        """Every user name, sorted (kept between changes: listing 10,000 users sorts once)."""
        if self._names is None:
            self._names = sorted(self.users)
        return self._names

    def __iter__(self) -> Iterator[User]:
        return (self.users[n] for n in list(self.names()) if n in self.users)

    def __len__(self) -> int:
        return len(self.users)


# --- AUTH throttling ------------------------------------------------------------------------------

THROTTLE_FREE = 3  # failures of one address or user answered at once; after that, attempts are spaced...
THROTTLE_FIRST = 0.05  # ...this many seconds apart, doubling with each further failure...
THROTTLE_MAX = 2.0  # ...up to this: one address, or one user from anywhere, gets at most a guess every 2 s
THROTTLE_QUEUE = 4.0  # an attempt that would wait longer than this (others are queued before it) is refused
THROTTLE_FORGET = 60.0  # seconds without a failure after which an address or user starts afresh
THROTTLE_ENTRIES = 10_000  # records per table (addresses, users, known pairs): the oldest go first
# Wrong passwords remembered per (address, user): a client library that retries a failed AUTH by
# itself (redis-py 8 does, ten times) repeats one mistake, which is no new guess.
THROTTLE_GUESSES = 4


def _spacing(failures: int) -> float:
    """Seconds between two checked attempts of an address or user with this many failures."""
    return min(THROTTLE_MAX, THROTTLE_FIRST * 2.0 ** (failures - THROTTLE_FREE))


_Key = TypeVar("_Key", str, tuple[str, str])  # an address, a user, or a known (address, user) pair


@dataclass
class _Guesses:
    """The wrong passwords an (address, user) pair tried lately, as keyed digests (never the passwords)."""

    last: float
    digests: list[bytes] = field(default_factory=list)


@dataclass
class _Tries:
    failures: int = 0
    pending: int = 0  # attempts admitted and not yet checked (counted as failures when spacing the next)
    last: float = 0.0  # when this address or user last tried
    next_at: float = 0.0  # the earliest time its next attempt is checked


class AuthThrottle:
    """Failed AUTHs counted per source address and per user, across connections, so that opening
    connection after connection gains no guesses. After ``THROTTLE_FREE`` failures of an address
    (or of a user, from anywhere) its attempts are checked one at a time, ``THROTTLE_FIRST``
    seconds apart doubling with each failure to ``THROTTLE_MAX``; attempts made at once queue
    (each counted as if the ones before it failed), and one whose turn is further than
    ``THROTTLE_QUEUE`` away is refused without being checked. So one address, or one user, gets at
    most one guess every ``THROTTLE_MAX`` seconds however many connections it opens.

    Another tenant guessing passwords must not slow the logins of those who know theirs: an
    (address, user) pair that has authenticated before is held back only by failures of that same
    pair, never by the user's failures from elsewhere nor by its address's failures on other users
    (behind a NAT or a load balancer every tenant shares one address). Its own failures still count
    for its address, so guessing never gets cheaper. Only someone guessing from the very address a
    user logs in from, for that very user, slows that user: a guesser indistinguishable from it. A
    success clears its address's failures. Every table is bounded (``THROTTLE_ENTRIES``, the least
    recently touched go first): a flood of addresses or user names costs bounded memory. ``clock``
    is monotonic seconds (injected).

    A wrong password an address already tried for a user within ``THROTTLE_FORGET`` (one of its last
    ``THROTTLE_GUESSES``) is no new guess: ``repeated`` says so, and such an attempt is checked at
    once (the password may have been set since) and counts nowhere. So a client library retrying a
    mistyped password (redis-py 8 reconnects and sends it ten more times) gets WRONGPASS at once
    each time and leaves the throttle as one failure would, while every different password is a
    guess and waits its turn. The passwords are kept only as HMACs under a key of this process.

    Each ``admit`` that returns a wait is followed by ``failed``, ``succeeded`` or (the connection
    went away before its turn) ``abandoned``; a ``repeated`` attempt is not admitted (``succeeded``
    with ``admitted=False`` if it is right after all).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, entries: int = THROTTLE_ENTRIES) -> None:
        self.clock = clock
        self.entries = entries
        self._addrs: OrderedDict[str, _Tries] = OrderedDict()
        self._users: OrderedDict[str, _Tries] = OrderedDict()
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._pairs: OrderedDict[tuple[str, str], _Tries] = OrderedDict()  # failures of known pairs
        self._guesses: OrderedDict[tuple[str, str], _Guesses] = OrderedDict()  # wrong passwords of pairs
        self._key = os.urandom(16)  # what the wrong passwords are kept under: never the passwords themselves

    def _get(self, table: OrderedDict[_Key, _Tries], key: _Key, now: float) -> _Tries:
        tries = table.get(key)
        if tries is None or (now - tries.last > THROTTLE_FORGET and tries.next_at <= now):
            tries = table[key] = _Tries(last=now)
        table.move_to_end(key)
        while len(table) > self.entries:
            table.popitem(last=False)
        return tries

    def _records(self, addr: str, user: str, now: float) -> list[_Tries]:
        """The records that space this attempt: a known pair's own, else its address's and user's."""
        if (addr, user) in self._known:
            return [self._get(self._pairs, (addr, user), now)]
        return [self._get(self._addrs, addr, now), self._get(self._users, user, now)]

    def admit(self, addr: str, user: str) -> float | None:
        """Seconds until this attempt may be checked (0: now), its turn taken; None: refused (too many before it)."""
        now = self.clock()
        records = self._records(addr, user, now)
        turn = max([now, *(r.next_at for r in records if r.failures + r.pending >= THROTTLE_FREE)])
        if turn - now > THROTTLE_QUEUE:
            return None
        for r in records:
            tried = r.failures + r.pending + 1  # as if this one fails too
            if tried >= THROTTLE_FREE:
                r.next_at = max(r.next_at, turn + _spacing(tried))
            r.pending += 1
            r.last = now
        return turn - now

    def _digest(self, user: str, password: bytes) -> bytes:
        message = user.encode("utf-8", "surrogateescape") + b"\0" + password
        return hmac.new(self._key, message, hashlib.sha256).digest()[:16]

    def repeated(self, addr: str, user: str, password: bytes) -> bool:
        """Whether ``password`` is a wrong one this address tried for ``user`` lately: no new guess."""
        seen = self._guesses.get((addr, user))
        if seen is None:
            return False
        if self.clock() - seen.last > THROTTLE_FORGET:
            del self._guesses[(addr, user)]
            return False
        return self._digest(user, password) in seen.digests

    def know(self, addr: str, user: str) -> None:
        """Take (``addr``, ``user``) as a known pair from now on (as after a success), its address's
        failures kept: another way than a success to know who is who (a node's registered address)."""
        self._known[(addr, user)] = None
        self._known.move_to_end((addr, user))
        while len(self._known) > self.entries:
            self._known.popitem(last=False)

    def failed(self, addr: str, user: str, password: bytes | None = None) -> None:
        """An admitted attempt failed; ``password``: the wrong password (remembered as a digest, so that
        trying it again is no new guess: ``repeated``)."""
        now = self.clock()
        if password is not None:
            seen = self._guesses.get((addr, user))
            if seen is None or now - seen.last > THROTTLE_FORGET:
                seen = self._guesses[(addr, user)] = _Guesses(now)
            seen.last = now
            seen.digests = [*seen.digests[-(THROTTLE_GUESSES - 1) :], self._digest(user, password)]
            self._guesses.move_to_end((addr, user))
            while len(self._guesses) > self.entries:
                self._guesses.popitem(last=False)
        records = self._records(addr, user, now)
        if (addr, user) in self._known:
            records.append(self._get(self._addrs, addr, now))  # a known pair's failure counts for its address
        for r in records:
            r.pending = max(0, r.pending - 1)
            r.failures += 1
            r.last = now
            if r.failures >= THROTTLE_FREE:
                r.next_at = max(r.next_at, now + _spacing(r.failures))

    def abandoned(self, addr: str, user: str) -> None:
        for r in self._records(addr, user, self.clock()):
            r.pending = max(0, r.pending - 1)

    def succeeded(self, addr: str, user: str, admitted: bool = True) -> None:
        if admitted:
            self.abandoned(addr, user)
        self._addrs.pop(addr, None)
        self._pairs.pop((addr, user), None)
        self._guesses.pop((addr, user), None)
        self.know(addr, user)

    def __len__(self) -> int:
        return len(self._addrs) + len(self._users) + len(self._known) + len(self._pairs) + len(self._guesses)


# --- the ACL file --------------------------------------------------------------------------------


def parse_acl_file(text: str) -> dict[str, str]:
    """Redis' ACL file: one ``user <name> <rules...>`` per line (blank lines and # comments skipped)."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] != "user" or len(words) < 2:
            raise ValueError(f"line {number}: expected 'user <name> <rules...>'")
        out[words[1]] = " ".join(words[2:])
    return out


def format_acl_file(users: Users) -> str:
    return "".join(f"user {u.name} {u.describe()}\n" for u in users)


# --- the ACL log ---------------------------------------------------------------------------------


@dataclass
class LogEntry:
    reason: str  # "auth", "command" or "key"
    context: str  # "toplevel" or "multi"
    subject: str  # what was denied: the command, the key, or "AUTH"
    username: str
    client_info: str
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    count: int = 1
    entry_id: int = 0

    def fields(self) -> dict[bytes, object]:
        return {
            b"count": self.count,
            b"reason": self.reason.encode(),
            b"context": self.context.encode(),
            b"object": self.subject.encode(),
            b"username": self.username.encode(),
            b"age-seconds": f"{time.time() - self.created:.3f}".encode(),
            b"client-info": self.client_info.encode(),
            b"entry-id": self.entry_id,
            b"timestamp-created": int(self.created * 1000),
            b"timestamp-last-updated": int(self.updated * 1000),
        }


class AclLog:
    """The last ``LOG_SIZE`` denials, newest first; a repeat within a minute bumps its entry's count.

    Bounded in size, whatever the requests: an entry's object and username are cut at
    ``MAX_STRING`` characters as SLOWLOG cuts arguments (``... (N more bytes)``), and each field of
    its client-info line (a client name, a library name of any length) at ``MAX_STRING`` too, with
    ``...`` and no space (clients split that line on spaces and ``=``). So the whole log, and an
    ``ACL LOG`` reply, stay under ~200 KB, where a key or a user name of 1 MB used to be kept whole.
    """

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._ids = 0

    def add(self, reason: str, context: str, obj: str, username: str, client_info: str) -> None:
        now = time.time()
        obj, username, client_info = capped(obj), capped(username), self._capped_info(client_info)
        for entry in self.entries:
            same = (entry.reason, entry.context, entry.subject, entry.username) == (reason, context, obj, username)
            if same and now - entry.updated < LOG_GROUP_SECONDS:
                entry.count += 1
                entry.updated = now
                entry.client_info = client_info
                self.entries.remove(entry)
                self.entries.insert(0, entry)
                return
        self.entries.insert(0, LogEntry(reason, context, obj, username, client_info, entry_id=self._ids))
        self._ids += 1
        del self.entries[LOG_SIZE:]

    @staticmethod
    def _capped_info(line: str) -> str:
        """A CLIENT LIST line with each ``field=value`` cut at ``MAX_STRING`` characters of value."""
        if len(line) <= MAX_STRING:
            return line
        fields = line.split(" ")
        for i, item in enumerate(fields):
            key, equals, value = item.partition("=")
            if len(key) > MAX_STRING or len(value) > MAX_STRING:
                fields[i] = key[:MAX_STRING] + equals + value[:MAX_STRING] + "..."
        return " ".join(fields)

    def reset(self) -> None:
        self.entries.clear()
