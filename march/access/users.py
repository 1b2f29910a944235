"""The users of a deployment (``Users``: every user by name, ``default`` always there) and Redis'
ACL file (``parse_acl_file``, ``format_acl_file``).

Each installed user carries the store revision of the record it was built from, and a record is
installed only if it is newer than what is known of its name (``Users.take``), so records that
arrive out of order never put an older state back.

**A stored record this version cannot read fails closed** (``Users.take``): the user is installed
*off*, with no password, no keys and no commands (what a new user starts with), never left as it
was and never given built-in rules. For ``default`` that means no connection is authenticated
without ``AUTH`` as another user (``NOAUTH``), where the built-in ``default`` would have let
everyone in. The node starts and serves; ``unreadable`` says which users are so (``march.access.stored``
logs them), and writing the user again (``ACL SETUSER``, which starts from nothing for such a
record, ``march restore`` with a valid record, ``ACL LOAD``) repairs it.

What this module never does: touch the store (``march.access.stored`` does) or know a command
beyond the table it is handed (``rules.AclCommand``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping

from march.access.rules import DEFAULT, DEFAULT_RULES, AclCommand, User, split_rules
from march.errors import CommandError

_GONE_KEPT = 4096  # deletions remembered until the watch passes them: a late write-back of one is refused


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
