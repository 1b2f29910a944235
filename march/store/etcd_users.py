"""ACL user records on etcd: one key per user under ``<prefix>/users/<name>``, its rules as the value.

Not guarded by leadership (any node may write a user, as ``march.store.contract`` says): a write
compares the key's mod revision with the one its caller read, and the revision a write lands at is
the record's revision. Followers watch the prefix. Listings are read in pages (``USERS_PAGE``),
never in one reply whatever the user count. ``EtcdStore`` hands its user calls here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from march.etcd.api import Delete, Etcd, Get, Put, modified_at
from march.etcd.keypath import KeyPaths, prefix_end
from march.store.contract import UserRecord, UserRecords

USERS_PAGE = 500  # users per range read: ~100 KB, far below gRPC's 4 MiB reply limit, whatever the user count


class EtcdUsers:
    """The user records of one etcd store (its client, key paths and deadlines)."""

    def __init__(self, etcd: Etcd, keys: KeyPaths, timeout: float, write_timeout: float) -> None:
        self.etcd = etcd
        self.keys = keys
        self.timeout = timeout
        self.write_timeout = write_timeout

    def _user_record(self, key: bytes, rules: bytes | None, revision: int) -> UserRecord:
        name = key[len(self.keys.users) :].decode("utf-8", "surrogateescape")
        return UserRecord(name, None if rules is None else rules.decode(), revision)

    async def load_users(self) -> UserRecords:
        """Every user, a page at a time. The pages are read at successive revisions; the first one's
        is where the watch starts (every later change comes through it, some twice: harmless, each
        record carries its revision)."""
        end = prefix_end(self.keys.users)
        start = self.keys.users
        records: list[UserRecord] = []
        first = 0
        while True:
            page = await self.etcd.range(Get(start, end, limit=USERS_PAGE), self.timeout)
            first = first or page.revision
            records += [self._user_record(kv.key, kv.value, kv.mod_revision) for kv in page.kvs]
            if not page.more or not page.kvs:
                break
            start = page.kvs[-1].key + b"\0"
        return UserRecords(records, first)

    async def load_user(self, name: str) -> UserRecord | None:
        kv = await self.etcd.get(self.keys.user(name), self.timeout)
        return None if kv is None else self._user_record(kv.key, kv.value, kv.mod_revision)

    async def save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        key = self.keys.user(name)
        write = Delete(key) if rules is None else Put(key, rules.encode())
        reply = await self.etcd.txn([modified_at(key, expected)], [write], [], self.write_timeout)
        return reply.revision if reply.succeeded else None

    async def watch_users(self, after: int) -> AsyncIterator[list[UserRecord]]:
        """The changes to ``<prefix>/users/`` after revision ``after`` (what ``load_users`` named:
        none is missed in between), each with its revision, until the watch breaks (StoreError)."""
        start = after + 1 if after else 0
        async for events in self.etcd.watch_events(self.keys.users, prefix_end(self.keys.users), start):
            yield [self._user_record(e.key, e.value, e.revision) for e in events]
