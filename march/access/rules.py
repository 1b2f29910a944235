"""A user's permissions in Redis' ACL syntax: ``User`` (its rules, applied in order; its checks), password hashing.

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

The rest of ``march.access``, one job a module: ``users`` (the users of a deployment, the ACL
file), ``throttle`` (failed AUTHs and link proofs), ``acl_log`` (ACL LOG), ``stored`` (users shared
through the store). This module knows the command table only through the values it is handed
(``AclCommand``: what a rule reads of a registered command); it imports no command and never
touches the store.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from march import errors
from march.errors import CommandError
from march.glob import Glob, compile_glob

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
        self.commands = _Commands()  # which commands it may run
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
                "commands": self.commands.copy(),
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
            self.commands.allow_all(table)
        elif low in ("nocommands", "-@all"):
            self.commands.reset()
        elif rule[:1] in "+-" and len(rule) > 1:
            self.commands.rule(rule, table)
        elif low == "reset":
            channels = ["resetchannels", "allchannels"] if all_channels else ["resetchannels"]
            for step in ("resetpass", "resetkeys", *channels, "nocommands", "off"):
                self._apply_one(step, table)
        else:
            raise _modifier(rule, errors.ACL_SYNTAX)
        self.unrestricted = self.commands.every and not self.commands.sub_denied and self.all_keys

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

    # --- reading -------------------------------------------------------------------------------

    def describe(self) -> str:
        """The rules that rebuild this user (ACL LIST without ``user <name>``), in Redis 7.0's order:
        on/off, passwords, keys, channels (``&*``, or ``resetchannels`` and each ``&pattern``), commands."""
        parts = ["on" if self.enabled else "off"]
        parts += ["nopass"] if self.nopass else [f"#{h}" for h in self.passwords]
        parts += [k.text() for k in self.keys]
        parts += ["&*"] if self.all_channels else ["resetchannels", *self._channel_texts()]
        parts += self.commands.rules
        return " ".join(parts)

    def commands_text(self) -> str:
        return " ".join(self.commands.rules)

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
        return self.commands.may_run(name, sub)

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
        if not self.commands.may_run(spec.name, sub) and not self.commands.first_arg_allowed(spec.name, args):
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


class _Commands:
    """Which commands a user may run: its command rules (``+cmd``, ``-cmd``, ``+cmd|sub``,
    ``+cmd|first-arg``, ``+@category``, ``allcommands``, ``nocommands``) as Redis 7.0 applies them,
    kept as applied (``rules``, for ``describe``), and the check (``may_run``)."""

    def __init__(self) -> None:
        self.every = False  # +@all: every command, present and future
        self.allowed: set[str] = set()  # command names allowed whole
        self.sub_allowed: set[str] = set()  # "cmd|sub" allowed although cmd is not
        self.sub_denied: set[str] = set()  # "cmd|sub" denied although cmd is
        self.first_args: dict[str, list[str]] = {}  # +select|0: a command allowed with these first arguments only
        self.rules: list[str] = ["-@all"]  # as applied, for describe()

    def copy(self) -> _Commands:
        other = _Commands()
        other.every = self.every
        other.allowed, other.sub_allowed, other.sub_denied = (
            set(self.allowed),
            set(self.sub_allowed),
            set(self.sub_denied),
        )
        other.first_args = {name: list(args) for name, args in self.first_args.items()}
        other.rules = list(self.rules)
        return other

    def allow_all(self, table: Mapping[str, AclCommand]) -> None:
        """``allcommands`` / ``+@all``."""
        self.every = True
        self.allowed = set(table)
        self.sub_allowed.clear()
        self.sub_denied.clear()
        self.first_args.clear()
        self.rules = ["+@all"]

    def reset(self) -> None:
        """``nocommands`` / ``-@all``."""
        self.every = False
        self.allowed.clear()
        self.sub_allowed.clear()
        self.sub_denied.clear()
        self.first_args.clear()
        self.rules = ["-@all"]

    def rule(self, given: str, table: Mapping[str, AclCommand]) -> None:
        """``+cmd``, ``-cmd``, ``+cmd|sub``, ``-cmd|sub``, ``+cmd|first-arg``, ``+@category``, ``-@category``."""
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
            self.every = False
        self.rules.append(rule)

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

    def may_run(self, name: str, sub: str = "") -> bool:
        if sub:
            full = f"{name}|{sub}"
            if full in self.sub_denied:
                return False
            if full in self.sub_allowed:
                return True
        return self.every or name in self.allowed

    def first_arg_allowed(self, name: str, args: list[bytes]) -> bool:
        """``+select|0``: the command is allowed with this first argument (compared in any case, as Redis)."""
        allowed = self.first_args.get(name)
        if not allowed or len(args) < 2:
            return False
        first = args[1].decode("utf-8", "surrogateescape").lower()
        return any(a.lower() == first for a in allowed)


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
