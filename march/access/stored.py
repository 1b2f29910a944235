"""Users shared through the store: every change a compare-and-set, every node following the store.

The store is the one source of truth for users (``march.store.contract``: each record has a revision
that changes with every write). ``users.Users`` is this node's copy, and this module keeps it in
step; ``march.access.rules`` knows the rules and ``march.access.users`` the users, this module knows where they live.

**Changing a user** (``ACL SETUSER``, ``DELUSER``, ``LOAD``, ``CONFIG SET requirepass``): read the
stored record with its revision (a linearizable read, never this node's copy, which lags the
store by the watch delay), apply the rules to *it*, write the result with a compare on that
revision; if someone wrote in between, read again and apply again, at most ``CAS_TRIES`` times
(then ``TRYAGAIN``, nothing written). So two nodes changing one user never lose each other's
change, a revoked password never comes back, and a deleted user stays deleted: a rule applied to
a user that is not stored applies to a new user (or ``default``'s built-in rules), never to the
old one. Once written, the record is installed here at once; the watch brings it to the others.

**Following the store.** At start, every stored user is read (a page at a time) and installed
``SLICE`` users per event-loop step (10,000 users never hold the loop for long). In cluster mode
the node then follows a watch whose events carry each changed record: one change installs one
user, whatever the number of users. A broken watch is followed by a new read (users whose revision
did not change are skipped) and a new watch. Records are installed only if newer than what this
node has (``Users.take``): a command's own write and the watch event reporting it, in any order,
leave the newest. Once a user is installed anew (here or from the watch), the server is told
(``updated``, awaited): it closes the user's connections subscribed to channels it may no longer
use, so a revoke made on any node drops those subscribers on every node.

**New users and ``acl-pubsub-default``**: a user that is not stored starts with the channels the
option says (Redis 7: ``resetchannels``), and so does ``reset`` in ``ACL SETUSER``; ``ACL LOAD``
and the ``aclfile`` read each user as a new one. Stored rules always say their channels
(``describe()``), so a stored user is the same on every node whatever each node's option.

**Seeding and requirepass** (on every start, before the node listens or, in cluster mode, once
etcd answers): a store with no user at all is seeded from ``aclfile`` (each user written only if
still absent: two nodes seeding at once write one file's users, not a mixture of one user);
then, if ``requirepass`` is set and the store has no ``default`` record, ``default`` is stored
with that password (``on #<sha256> ~* &* +@all``). A stored ``default`` always wins over
``requirepass``: a node whose ``requirepass`` the stored ``default`` does not accept logs a
warning at start and keeps the stored one. ``CONFIG SET requirepass`` writes the stored
``default`` (on every node at once). The file and the option only ever *seed*: after that, ACL
commands are the way to change users, and what they report holds on every node.

**A stored record this version cannot read** (written by an older version's restore, or into the
store by hand: ``on #zz +@all ~*``) fails closed, at start and whenever the watch brings one: the
user is *off*, with nothing (``users.Users.take``), and an error is logged naming the user and what
could not be read (never the rules themselves). For ``default`` this means every client must
``AUTH`` as another user; ``requirepass`` does not replace it (the stored record still wins: it may
hold a newer password than the file's), so the node never falls back to the built-in open
``default``. The node starts and serves. An admin repairs the user with ``ACL SETUSER`` (which
applies its rules to a user with nothing, as for a new user), ``ACL LOAD``, or, when no admin can
log in, ``march restore`` of a file holding a valid record for it (restore replaces a stored user
only when it cannot be read; see ``march.backup.operations``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from march import errors
from march.access.rules import DEFAULT, User
from march.access.users import Users, parse_acl_file
from march.clock import Clock
from march.config import Config
from march.errors import CommandError, StoreError
from march.store.contract import Store, UserRecord, UserRecords

log = logging.getLogger("march")

CAS_TRIES = 16  # read-modify-writes of one user that may lose a race in a row before TRYAGAIN (nothing written)
SLICE = 256  # users installed per event-loop step (~5 ms): a reload of 10,000 users never stalls other clients
LOAD_WRITES = 32  # ACL LOAD and seeding: store writes in flight at once
RETRY = 0.5  # seconds between attempts to read the users while the store does not answer


class SharedUsers:
    """This node's users (``users``), kept in step with the store, and the changes made through it."""

    def __init__(self, store: Store, users: Users, config: Config, clock: Clock, *, follow: bool) -> None:
        self.store = store
        self.users = users
        self.config = config  # the node's, kept current by the server (requirepass, aclfile)
        self.clock = clock
        self.follow = follow  # cluster mode: other nodes change the users too (watch them)
        # Called after users changed here with the users removed: the server closes their
        # connections and lets clients waiting for ``default`` in. Not called for other changes.
        self.changed: Callable[[list[User]], None] = lambda _: None
        # Awaited after users were installed anew here (a command's change or another node's): the
        # server closes their connections subscribed to channels they may no longer use, as Redis 7.
        self.updated: Callable[[list[User]], Awaitable[None]] = _nothing
        self._task: asyncio.Task[None] | None = None
        self._warned = False  # the requirepass warning is logged once, not at every reload

    # --- life -----------------------------------------------------------------------------------

    async def open(self) -> None:
        """Single node: read (and seed) the users now. Cluster: start following them (retrying
        until etcd answers); until then nobody is authenticated (``users.loaded`` is False)."""
        if self.follow:
            self._task = asyncio.get_running_loop().create_task(self._follow())
        else:
            await self._load()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        while True:
            try:
                read = await self._load()
                watch = self.store.watch_users(read)  # from right after what _load read: no change is missed
                if watch is None:
                    return
                try:
                    async for records in watch:
                        await self._take(records)
                        self.users.advance(max(r.revision for r in records))
                finally:
                    await watch.aclose()  # type: ignore[attr-defined]
            except StoreError as exc:
                log.debug("users: %s", exc)
            await self.clock.sleep(RETRY)

    async def _load(self) -> int:
        """Read (and seed) the users and install them; the revision they were read at."""
        snapshot = await self.store.load_users()
        seeding = not snapshot.records
        if seeding and self.config.aclfile:
            seeded = await self._seed(self._read_aclfile())
            snapshot = UserRecords(seeded, snapshot.revision)
        await self._seed_default(snapshot)
        if seeding and all(r.name != DEFAULT for r in snapshot.records):
            # Another node seeded at the same moment and its default was written after our read: take
            # it now, not when the watch brings it (meanwhile default would have its built-in rules,
            # no password).
            stored = await self.store.load_user(DEFAULT)
            if stored is not None:
                snapshot.records.append(stored)
        await self._install(snapshot)
        return snapshot.revision

    def _read_aclfile(self) -> dict[str, str]:
        path = self.config.aclfile
        try:
            return self.normalize(parse_acl_file(Path(path).read_text()))
        except (OSError, ValueError, CommandError) as exc:
            raise StoreError(f"aclfile {path}: {getattr(exc, 'message', None) or exc}") from None

    def normalize(self, described: dict[str, str]) -> dict[str, str]:
        """name -> rules as the store keeps them (``describe()``); CommandError if one is invalid.
        Each user is read as a new one (``acl-pubsub-default`` gives its channels first, as in Redis)."""
        every = self.all_channels
        return {name: self.users.build(name, rules, every).describe() for name, rules in described.items()}

    @property
    def all_channels(self) -> bool:
        """``acl-pubsub-default allchannels``: what a new user (and ``reset``) gets of channels."""
        return self.config.acl_pubsub_default == "allchannels"

    async def _seed(self, described: dict[str, str]) -> list[UserRecord]:
        """Store each of ``described`` if still absent; stop at the first that is not (another
        node seeds, or an admin got there first). The records written."""
        written: list[UserRecord] = []
        names = list(described)
        for i in range(0, len(names), LOAD_WRITES):
            chunk = names[i : i + LOAD_WRITES]
            revisions = await asyncio.gather(*(self.store.save_user(n, described[n], 0) for n in chunk))
            written += [UserRecord(n, described[n], r) for n, r in zip(chunk, revisions, strict=True) if r is not None]
            if None in revisions:
                log.info("aclfile: the store got users meanwhile; seeding stopped, the stored users hold")
                break
        return written

    async def _seed_default(self, snapshot: UserRecords) -> None:
        password = self.config.requirepass
        if not password:
            return
        stored = next((r for r in snapshot.records if r.name == DEFAULT), None)
        if stored is None:
            rules = self.users.build(DEFAULT, None)
            rules.apply(["resetpass", ">" + password], self.users.table)
            revision = await self.store.save_user(DEFAULT, rules.describe(), 0)
            if revision is not None:
                snapshot.records.append(UserRecord(DEFAULT, rules.describe(), revision))
                return
            stored = await self.store.load_user(DEFAULT)  # another node stored one meanwhile: that one holds
            if stored is None:
                return
            snapshot.records.append(stored)
        try:
            accepted = self.users.build(DEFAULT, stored.rules).check_password(password.encode())
        except CommandError:
            return  # unreadable: installed off, and said so (``take``); requirepass does not replace it
        if not accepted and not self._warned:
            self._warned = True
            log.warning(
                "requirepass differs from the stored default user's password: the stored one holds "
                "(change it with ACL SETUSER default or CONFIG SET requirepass)"
            )

    async def _install(self, snapshot: UserRecords) -> None:
        """Make this node's users what ``snapshot`` says, ``SLICE`` users per loop step."""
        users = self.users
        removed = [
            u for n in users.missing({r.name for r in snapshot.records}, snapshot.revision) if (u := users.remove(n))
        ]
        updated: list[User] = []
        for i, record in enumerate(snapshot.records):
            updated += self.take([record], notify=False)
            if i % SLICE == SLICE - 1:
                await asyncio.sleep(0)
        users.advance(snapshot.revision)
        users.loaded = True
        self.changed(removed)  # (also lets in the clients that waited for the users to be known)
        if updated:
            await self.updated(updated)

    # --- applying records here ------------------------------------------------------------------

    def take(self, records: Iterable[UserRecord], notify: bool = True) -> list[User]:
        """Install these records here, each only if newer than what this node has; the users
        installed anew (``updated`` is the caller's to await: ``_take``)."""
        removed: list[User] = []
        updated: list[User] = []
        default_changed = False
        for r in records:
            changed, gone = self.users.take(r.name, r.rules, r.revision)
            default_changed |= changed and r.name == DEFAULT
            if gone is not None:
                removed.append(gone)
            elif changed and (user := self.users.get(r.name)) is not None:
                updated.append(user)
            if changed and r.name in self.users.unreadable:
                _log_unreadable(r.name, self.users.unreadable[r.name])
        if notify and (removed or default_changed):
            self.changed(removed)
        return updated

    async def _take(self, records: Iterable[UserRecord]) -> None:
        """``take``, then the server's look at the users that changed (``updated``)."""
        updated = self.take(records)
        if updated:
            await self.updated(updated)

    # --- changes (ACL commands, CONFIG SET requirepass) ------------------------------------------

    async def update(self, name: str, build: Callable[[User], str | None]) -> UserRecord | None:
        """Read-modify-write of one user: ``build`` gets the user as stored (a new user, or
        ``default``'s built-in rules, if it is not stored) and returns its new rules (None:
        delete). Written only if nobody wrote it meanwhile, else read and built again; then
        installed here. Returns the record it was built from (None: it was not stored). Raises
        whatever ``build`` raises (nothing written) or TRYAGAIN after ``CAS_TRIES`` lost races."""
        for _ in range(CAS_TRIES):
            current = await self.store.load_user(name)
            # a stored record that cannot be read stands for a user with nothing: the rules apply to that
            rules = build(self._stored_or_new(name, current))
            if current is None and rules is None:
                return None  # nothing to delete
            revision = await self.store.save_user(name, rules, 0 if current is None else current.revision)
            if revision is not None:
                await self._take([UserRecord(name, rules, revision)])
                return current
        raise CommandError(errors.ACL_CHANGING.format(name))

    def _stored_or_new(self, name: str, current: UserRecord | None) -> User:
        """The user as stored, or as a user that is not stored starts (``acl-pubsub-default`` applies to a new one)."""
        if current is not None:
            return self.users.stored(name, current.rules)
        return self.users.build(name, None, self.all_channels)

    async def set_user(self, name: str, rules: list[str]) -> None:
        """ACL SETUSER: ``rules`` applied to the stored user (``reset`` among them gives the
        channels of ``acl-pubsub-default``, as in Redis)."""
        every = self.all_channels

        def build(user: User) -> str:
            user.apply(rules, self.users.table, every)
            return user.describe()

        await self.update(name, build)

    async def delete(self, names: Iterable[str]) -> int:
        """ACL DELUSER: how many of ``names`` were stored (and are deleted now)."""
        found = 0
        for name in dict.fromkeys(names):
            found += await self.update(name, lambda _: None) is not None
        return found

    async def set_default_password(self, password: str) -> None:
        """CONFIG SET requirepass: the stored ``default``'s only password ("": none), on every node."""
        rules = ["resetpass", ">" + password] if password else ["resetpass", "nopass"]
        await self.set_user(DEFAULT, rules)

    async def load(self, described: dict[str, str]) -> None:
        """ACL LOAD: make the stored users exactly ``described`` (normalized rules). Each write
        compares what was just read from the store (never this node's copy): a user stored by
        anyone before the LOAD started and not in the file is deleted, whoever wrote it last."""
        stored = await self.store.load_users()
        todo: list[tuple[str, str | None]] = list(described.items())
        todo += [(r.name, None) for r in stored.records if r.name not in described]
        current = {r.name: r for r in stored.records}
        for i in range(0, len(todo), LOAD_WRITES):
            chunk = todo[i : i + LOAD_WRITES]
            await asyncio.gather(*(self._load_one(n, rules, current.get(n)) for n, rules in chunk))

    async def _load_one(self, name: str, rules: str | None, current: UserRecord | None) -> None:
        if (current.rules if current is not None else None) == rules:
            return  # already so (a LOAD of the same file writes nothing)
        revision = await self.store.save_user(name, rules, 0 if current is None else current.revision)
        if revision is not None:
            await self._take([UserRecord(name, rules, revision)])
            return
        await self.update(name, lambda _: rules)  # changed meanwhile: the file's version still wins


def _log_unreadable(name: str, why: str) -> None:
    """Say that a stored user could not be read and is off now: its name (cut) and the reason
    (the rule quoted in Redis' error is left out: a hand-written record may hold a password)."""
    reason = why.rpartition("': ")[2] if "modifier '" in why else why.removeprefix("ERR ")
    shown = name if len(name) <= 64 else name[:64] + "..."
    log.error(
        "the stored user %r cannot be read by this version (%s): it is off, with no password and no rights, "
        "until it is written again (ACL SETUSER %s ..., ACL LOAD, or march restore with a valid record)%s",
        shown,
        reason,
        shown,
        "; no client is authenticated without AUTH as another user" if name == DEFAULT else "",
    )


async def _nothing(users: list[User]) -> None:
    """``SharedUsers.updated`` until the server sets it."""
