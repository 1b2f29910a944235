"""``march backup``, ``march restore`` and ``march import-floors``: a deployment's durable state in
one portable file, and floors taken from the data a team already has. Nothing here runs in a node.

**The file** is JSON lines. The first line is the header ``{"format": "march-backup", "version": 1,
...}``; then one line per record: ``{"type": "sequence", "key", "kind", "ceiling", "settings"}``,
``{"type": "user", "name", "rules"}`` (passwords only hashed, as stored), ``{"type": "worker",
"namespace", "id", "token", "expires_ms", "floor_ms", "ttl"}``, ``{"type": "workers_retired",
"floor_ms"}``; the last line ``{"type": "end", "sequences": n, "users": n, "workers": n}`` says the
file is whole (a truncated file has no end line and is refused). Names that are not UTF-8 are
written as ``key_hex`` / ``namespace_hex`` instead.

**Backup** reads while nodes serve, in bounded pages (``PAGE``): SQLite through a read-only
connection of its own (WAL: it never waits for the node's writer, nor the writer for it; each page
is its own short read), etcd through ``EtcdStore``'s reads (each page one range or one batched
transaction). A backup is therefore not one snapshot: every ceiling in it is one the store held
while the backup ran, which is all a restore needs (ceilings only grow).

**Restore** and **import-floors** write only upwards: a sequence that is absent is created with the
file's ceiling and settings; one that exists keeps its kind and settings and its ceiling is raised
to the file's when that is higher, never lowered (so restoring an old backup after more IDs were
issued changes nothing for those sequences and no ID can repeat). A user that exists is kept (its
stored rules are newer than any backup's), unless its stored rules cannot be read (a node keeps
such a user off, ``march.access.stored``): then the file's record replaces it, so restore is also the way
back in when the stored ``default`` is unreadable and no admin can log in. An absent user is
created. A worker record that exists
keeps its holder and gets the higher ``floor_ms``; an absent one is written released (token
``""``: no holder survives a restore) with its floor; the retired floor is raised likewise.

Where the writes go, and why they can never break what a serving primary relies on:

- SQLite: only into a stopped node's data dir. ``SqliteStore.open`` takes the data dir's lock, so a
  running node makes restore fail with the lock's message, nothing written.
- etcd: only while no primary serves. A primary holds a range of IDs below its ceiling in memory
  and writes back the settings it read; a ceiling raised under it would let it hand out IDs below
  the restored floor until its range ran out, and settings written under it would be overwritten.
  So every restore transaction compares that no leader key of any group exists (one range compare
  over every key starting with ``<prefix>/leader``) with, per
  sequence, ``create_revision(seq) == 0`` (still absent) or ``value(seq) == what was read`` (so
  the raise is computed from the stored value in the same transaction). A primary elected
  meanwhile fails the transaction and restore stops, saying so. (Creating names with no term
  current also leaves SCAN's resume points sound: a point is exact only within the term that
  counted it, ``march.store.cursors``.) With a primary serving, raise
  floors through it instead: ``--through HOST:PORT`` sends ``SET key N`` (the durable, fenced
  floor raise every node already does) for each sequence-kind record; see docs/backup.md.

**Only what the live commands accept.** The whole input is read and checked before anything is
written (``Checks``), and one bad record refuses it all, naming its line (or, for import-floors
from a table or a Redis, its key): malformed JSON, an unknown version or record type, a
non-integer or out-of-range number; a sequence name longer than ``max_key_len`` or more sequences
than ``max_sequences``; settings that SEQ.CREATE/SEQ.ALTER would refuse (``policies.settings_problem``,
strict: ``{"min_batch": "x"}``, a timestamp sequence without a whole layout, a value out of
bounds, a setting of the other kind); a user name or rules that ACL SETUSER would refuse (the
rules go through the same parser, with the command table, and are stored as ACL LIST shows them);
a worker namespace or TTL that WORKER.ACQUIRE would refuse. The limits are those of the config the
tool is given (the nodes' own: same options as ``march serve``).
"""

from __future__ import annotations

import asyncio
import csv
import importlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from march.access.rules import User, Users, check_username
from march.commands.table import (
    COMMANDS,  # (importing march.commands registers every command: ACL rules read the table)
)
from march.config import MAX_ID, Config
from march.errors import CommandError
from march.etcd.api import Etcd, Get, Put, Request, created_at, none_in, value_is
from march.etcd.keypath import KeyPaths, prefix_end
from march.generators.sequence import TOP
from march.keyspace.policies import settings_problem
from march.keyspace.worker_ids import IDS, MAX_TTL
from march.node import etcd_client
from march.store.contract import SINGLE_NODE, SequenceRecord, WorkerRecord
from march.store.etcd_store import EtcdStore
from march.store.etcd_values import decode_record, decode_worker, encode_ceiling, encode_record, encode_worker
from march.store.membership import SQLITE_FILE
from march.store.sqlite_store import SqliteStore

FORMAT = "march-backup"
VERSION = 1  # bump when a record's meaning changes; restore refuses versions it does not know
PAGE = 1000  # records per read while nodes serve: one short read each, never a long transaction
WRITE_BATCH = 90  # sequences per etcd restore transaction: 1 + n compares, under etcd's 128 ops
PROGRESS_MIN = 5000  # imports at least this large show a progress bar (on a terminal only)


class BackupError(Exception):
    """Bad input or a refused write: the message says what and where; nothing was written."""


@dataclass(frozen=True)
class Checks:
    """What the live commands accept, for the records of a file or an import (``of(config)``)."""

    max_key_len: int  # sequence names and worker namespaces, as INCR/SEQ.CREATE/WORKER.ACQUIRE
    max_sequences: int  # 0: no limit
    max_bulk_len: int  # one argument: a user name, one ACL rule
    max_args: int  # ACL SETUSER name rule...: at most this many arguments in all
    users: Users = field(default_factory=lambda: Users(COMMANDS))  # the ACL rules' parser, with the command table

    @classmethod
    def of(cls, config: Config) -> Checks:
        return cls(config.max_key_len, config.max_sequences, config.max_bulk_len, config.max_args)

    def key(self, key: bytes, where: str, what: str = "key") -> bytes:
        if len(key) > self.max_key_len:
            raise BackupError(
                f"{where}: the {what} is {len(key)} bytes, longer than max_key_len ({self.max_key_len}); "
                "give the tool the nodes' config if theirs is larger"
            )
        return key

    def sequence(self, record: SequenceRecord, where: str) -> SequenceRecord:
        self.key(record.key, where)
        why = settings_problem(record.kind, record.settings, strict=True)
        if why is not None:
            raise BackupError(f"{where}: sequence {_shown(record.key.decode('utf-8', 'replace'))}: {why}")
        return record

    def count(self, sequences: int) -> None:
        if self.max_sequences and sequences > self.max_sequences:
            raise BackupError(f"{sequences} sequences: more than max_sequences ({self.max_sequences})")

    def user(self, name: str, rules: str, where: str) -> str:
        """``rules`` as ACL SETUSER on a new user leaves them (as ACL LIST shows them), or BackupError."""
        try:
            check_username(name)
            if len(name.encode("utf-8", "surrogateescape")) > self.max_bulk_len:
                raise BackupError(f"{where}: the user name is longer than max_bulk_len ({self.max_bulk_len})")
            words = rules.split()
            if len(words) > self.max_args - 3 or any(
                len(w.encode("utf-8", "surrogateescape")) > self.max_bulk_len for w in words
            ):
                raise BackupError(f"{where}: user {_shown(name)}: rules longer than one ACL SETUSER may send")
            return self.users.build(name, rules).describe()
        except CommandError as exc:
            raise BackupError(f"{where}: user {_shown(name)}: {exc.message.removeprefix('ERR ')}") from None


def _shown(name: bytes | str) -> str:
    """A name in a message: its repr, cut at 60 characters (a 2 MB name stays out of the terminal)."""
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."


def _user_readable(name: str, rules: str) -> bool:
    """Whether a node can read this stored user (one that cannot is off there: restore may replace it)."""
    try:
        User(name).apply(["reset", *rules.split()], COMMANDS)
    except CommandError:
        return False
    return True


# --- the file ---------------------------------------------------------------------------------


def _name_fields(field_name: str, raw: bytes) -> dict[str, str]:
    try:
        return {field_name: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {field_name + "_hex": raw.hex()}


def _name_of(line: dict[str, Any], field_name: str, where: str) -> bytes:
    if isinstance(line.get(field_name), str):
        return str(line[field_name]).encode("utf-8")
    if isinstance(line.get(field_name + "_hex"), str):
        try:
            return bytes.fromhex(line[field_name + "_hex"])
        except ValueError:
            raise BackupError(f"{where}: {field_name}_hex is not hex") from None
    raise BackupError(f"{where}: no {field_name}")


def _int(line: dict[str, Any], name: str, where: str, high: int) -> int:
    value = line.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BackupError(f"{where}: {name} is not an integer")
    if not 0 <= value <= high:
        raise BackupError(f"{where}: {name} {value} is out of range (0 .. {high})")
    return value


@dataclass
class Backup:
    """What one backup file holds."""

    sequences: list[SequenceRecord] = field(default_factory=list)
    users: dict[str, str] = field(default_factory=dict)
    workers: list[WorkerRecord] = field(default_factory=list)
    workers_retired: int = 0


def sequence_line(record: SequenceRecord) -> dict[str, Any]:
    return {
        "type": "sequence",
        **_name_fields("key", record.key),
        "kind": record.kind,
        "ceiling": record.ceiling,
        "settings": dict(record.settings),
    }


def worker_line(record: WorkerRecord) -> dict[str, Any]:
    return {
        "type": "worker",
        **_name_fields("namespace", record.namespace),
        "id": record.id,
        "token": record.token.decode("latin-1"),
        "expires_ms": record.expires_ms,
        "floor_ms": record.floor_ms,
        "ttl": record.ttl,
    }


def _object(text: str, where: str) -> dict[str, Any]:
    try:
        line = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackupError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(line, dict):
        raise BackupError(f"{where}: not a JSON object")
    return line


def _check_header(line: dict[str, Any], where: str) -> None:
    if line.get("format") != FORMAT:
        raise BackupError(f"{where}: not a March backup (no {FORMAT!r} header)")
    if line.get("version") != VERSION:
        raise BackupError(
            f"{where}: backup format version {line.get('version')!r} is not supported (this march reads {VERSION})"
        )


def _sequence(line: dict[str, Any], where: str, checks: Checks) -> SequenceRecord:
    seq_kind = line.get("kind")
    if seq_kind not in ("sequence", "timestamp"):
        raise BackupError(f"{where}: unknown sequence kind {seq_kind!r}")
    settings = line.get("settings", {})
    if not isinstance(settings, dict):
        raise BackupError(f"{where}: settings is not an object")
    ceiling = _int(line, "ceiling", where, TOP)
    return checks.sequence(SequenceRecord(_name_of(line, "key", where), seq_kind, ceiling, settings), where)


def _worker(line: dict[str, Any], where: str, checks: Checks) -> WorkerRecord:
    token = line.get("token")
    if not isinstance(token, str):
        raise BackupError(f"{where}: token is not a string")
    namespace = checks.key(_name_of(line, "namespace", where), where, "worker namespace")
    if not namespace:
        raise BackupError(f"{where}: the worker namespace is empty")
    ttl = _int(line, "ttl", where, MAX_TTL)
    if ttl < 1:
        raise BackupError(f"{where}: ttl {ttl} is out of range (1 .. {MAX_TTL})")
    return WorkerRecord(
        namespace,
        _int(line, "id", where, IDS - 1),
        token.encode("latin-1"),
        _int(line, "expires_ms", where, TOP),
        _int(line, "floor_ms", where, TOP),
        ttl,
    )


class _Reader:
    """One pass over a backup file: the records read so far, and whether its header and end came."""

    def __init__(self, checks: Checks) -> None:
        self.checks = checks
        self.out = Backup()
        self.header = False
        self.end: dict[str, Any] | None = None
        self.sequences: dict[bytes, SequenceRecord] = {}
        self.sequence_lines = 0

    def add(self, line: dict[str, Any], where: str) -> None:
        if not self.header:
            _check_header(line, where)
            self.header = True
            return
        kind = line.get("type")
        if kind == "sequence":
            record = _sequence(line, where, self.checks)
            self.sequence_lines += 1
            known = self.sequences.get(record.key)
            if known is None or known.ceiling < record.ceiling:  # a name twice: the higher ceiling
                self.sequences[record.key] = record
        elif kind == "user":
            name, rules = line.get("name"), line.get("rules")
            if not isinstance(name, str) or not isinstance(rules, str):
                raise BackupError(f"{where}: a user needs a name and rules (strings)")
            self.out.users[name] = self.checks.user(name, rules, where)
        elif kind == "worker":
            self.out.workers.append(_worker(line, where, self.checks))
        elif kind == "workers_retired":
            self.out.workers_retired = max(self.out.workers_retired, _int(line, "floor_ms", where, TOP))
        elif kind == "end":
            self.end = line
        else:
            raise BackupError(f"{where}: unknown record type {kind!r}")

    def finish(self) -> Backup:
        if not self.header:
            raise BackupError("empty file: no March backup header")
        if self.end is None:
            raise BackupError("no end line: the file is truncated")
        out = self.out
        out.sequences = list(self.sequences.values())
        self.checks.count(len(out.sequences))
        lines = {"sequences": self.sequence_lines, "users": len(out.users), "workers": len(out.workers)}
        for name, count in lines.items():
            if self.end.get(name) != count:
                raise BackupError(f"the end line counts {self.end.get(name)!r} {name}, the file holds {count}")
        return out


def read_backup(stream: IO[str], checks: Checks) -> Backup:
    """Parse and check a whole backup file (BackupError at the first bad line: nothing is written)."""
    reader = _Reader(checks)
    for number, text in enumerate(stream, 1):
        where = f"line {number}"
        if not text.strip():
            continue
        if reader.end is not None:
            raise BackupError(f"{where}: data after the end line")
        reader.add(_object(text, where), where)
    return reader.finish()


def with_margin(backup: Backup, margin: int) -> Backup:
    """``backup`` with every plain sequence's ceiling raised by ``margin`` (capped at the top): for a
    store that lost what was handed out after the backup. Timestamp ceilings are times, left alone."""
    if not 0 <= margin <= MAX_ID:
        raise BackupError(f"--margin {margin} is out of range (0 .. {MAX_ID})")
    if margin:
        backup.sequences = [
            SequenceRecord(r.key, r.kind, min(TOP, r.ceiling + margin), r.settings) if r.kind == "sequence" else r
            for r in backup.sequences
        ]
    return backup


# --- reading a store while it serves ------------------------------------------------------------


class _SqliteReader:
    """Pages from a node's SQLite file, read-only, without its lock (WAL readers never block the writer)."""

    def __init__(self, data_dir: str) -> None:
        path = Path(data_dir) / SQLITE_FILE
        if not path.exists():
            raise BackupError(f"no March store in {data_dir} ({path} does not exist)")
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA busy_timeout = 5000")

    def _page(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, args).fetchall()

    async def sequences(self) -> AsyncIterator[list[SequenceRecord]]:
        after = b""
        while True:
            rows = await asyncio.to_thread(
                self._page,
                "SELECT key, kind, ceiling, settings FROM sequences WHERE key > ? ORDER BY key LIMIT ?",
                (after, PAGE),
            )
            if not rows:
                return
            yield [SequenceRecord(bytes(k), kind, int(c), json.loads(s)) for k, kind, c, s in rows]
            after = bytes(rows[-1][0])

    async def users(self) -> dict[str, str]:
        users: dict[str, str] = {}
        after = ""
        while True:
            rows = await asyncio.to_thread(
                self._page, "SELECT name, rules FROM users WHERE name > ? ORDER BY name LIMIT ?", (after, PAGE)
            )
            if not rows:
                return users
            users.update((str(n), str(r)) for n, r in rows)
            after = rows[-1][0]

    async def workers(self) -> AsyncIterator[list[WorkerRecord]]:
        after: tuple[bytes, int] = (b"", -1)
        sql = (
            "SELECT namespace, id, token, expires_ms, floor_ms, ttl FROM workers"
            " WHERE (namespace, id) > (?, ?) ORDER BY namespace, id LIMIT ?"
        )
        while True:
            rows = await asyncio.to_thread(self._page, sql, (*after, PAGE))
            if not rows:
                return
            yield [WorkerRecord(bytes(n), int(i), bytes(t), int(e), int(f), int(ttl)) for n, i, t, e, f, ttl in rows]
            after = (bytes(rows[-1][0]), int(rows[-1][1]))

    async def workers_retired(self) -> int:
        rows = await asyncio.to_thread(self._page, "SELECT floor_ms FROM workers_retired", ())
        return int(rows[0][0]) if rows else 0

    async def close(self) -> None:
        self.db.close()


class _EtcdReader:
    """Pages from etcd through ``EtcdStore``'s own reads (each a range or one batched transaction)."""

    def __init__(self, etcd: Etcd, keys: KeyPaths, timeout: float) -> None:
        self.store = EtcdStore(etcd, keys, timeout)

    async def sequences(self) -> AsyncIterator[list[SequenceRecord]]:
        after: bytes | None = None
        while True:
            names = await self.store.list_keys(after=after, limit=PAGE)
            if not names:
                return
            found = await asyncio.gather(*(self.store.load(n) for n in names))  # one loop turn: batched reads
            yield [r for r in found if r is not None]
            after = names[-1]

    async def users(self) -> dict[str, str]:
        loaded = await self.store.load_users()
        return {u.name: u.rules for u in loaded.records if u.rules is not None}

    async def workers(self) -> AsyncIterator[list[WorkerRecord]]:
        after: bytes | None = None
        while True:
            spaces = await self.store.worker_namespaces(after, 100)
            if not spaces:
                return
            for space in spaces:
                yield await self.store.load_workers(space)
            after = spaces[-1]

    async def workers_retired(self) -> int:
        return await self.store.retired_worker_floor()

    async def close(self) -> None:
        pass


@dataclass
class Counts:
    sequences: int = 0
    users: int = 0
    workers: int = 0


async def write_backup(reader: _SqliteReader | _EtcdReader, out: IO[str], source: str) -> Counts:
    counts = Counts()

    def emit(line: dict[str, Any]) -> None:
        out.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")

    emit({"format": FORMAT, "version": VERSION, "source": source, "created_ms": int(time.time() * 1000)})
    async for page in reader.sequences():
        for record in page:
            emit(sequence_line(record))
            counts.sequences += 1
    for name, rules in sorted((await reader.users()).items()):
        emit({"type": "user", "name": name, "rules": rules})
        counts.users += 1
    async for workers in reader.workers():
        for worker in workers:
            emit(worker_line(worker))
            counts.workers += 1
    emit({"type": "workers_retired", "floor_ms": await reader.workers_retired()})
    emit({"type": "end", "sequences": counts.sequences, "users": counts.users, "workers": counts.workers})
    out.flush()
    return counts


# --- writing: only upwards ----------------------------------------------------------------------


@dataclass
class Summary:
    """What a restore or an import changed (or, in a dry run, would change)."""

    created: int = 0
    raised: int = 0
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)  # sequences left alone, with the reason
    users_created: int = 0
    users_kept: int = 0
    users_replaced: int = 0  # stored, but unreadable (off on every node): the file's record replaces it
    workers_written: int = 0
    workers_kept: int = 0

    def lines(self, applied: bool) -> list[str]:
        verb = "" if applied else "would be "
        out = [f"sequences: {self.created} {verb}created, {self.raised} {verb}raised, {self.unchanged} unchanged"]
        if self.users_created or self.users_kept or self.users_replaced:
            replaced = f", {self.users_replaced} {verb}replaced (stored unreadable)" if self.users_replaced else ""
            out.append(f"users: {self.users_created} {verb}created, {self.users_kept} kept as stored{replaced}")
        if self.workers_written or self.workers_kept:
            out.append(f"worker records: {self.workers_written} {verb}written, {self.workers_kept} unchanged")
        out.extend(f"skipped {s}" for s in self.skipped[:20])
        if len(self.skipped) > 20:
            out.append(f"... and {len(self.skipped) - 20} more skipped")
        return out


def _plan(wanted: SequenceRecord, stored: SequenceRecord | None, summary: Summary) -> SequenceRecord | None:
    """The record to write for ``wanted`` given what is stored (None: nothing to write)."""
    if stored is None:
        summary.created += 1
        return wanted
    if stored.kind != wanted.kind:
        summary.skipped.append(f"{wanted.key!r}: stored as a {stored.kind}, the input says {wanted.kind}")
        return None
    if stored.ceiling >= wanted.ceiling:
        summary.unchanged += 1
        return None
    summary.raised += 1
    return SequenceRecord(stored.key, stored.kind, wanted.ceiling, stored.settings)


class Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal and the job is large."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self.shown = total >= PROGRESS_MIN and sys.stderr.isatty()
        self._last = 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.shown and (now - self._last > 0.1 or self.done >= self.total):
            self._last = now
            width = 30
            filled = width * self.done // max(1, self.total)
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


class _SqliteWriter:
    """A stopped node's data dir: ``SqliteStore.open`` takes its lock (a running node: StoreLocked)."""

    def __init__(self, config: Config) -> None:
        self.store = SqliteStore(config.data_dir, join_other=config.join_other_cluster)
        self.path = Path(config.data_dir) / SQLITE_FILE

    async def open(self) -> None:
        await self.store.open()

    async def close(self) -> None:
        await self.store.close()

    async def sequences(self, wanted: list[SequenceRecord], summary: Summary, apply: bool) -> None:
        found = await asyncio.gather(*(self.store.load(r.key) for r in wanted))
        plans = [_plan(w, s, summary) for w, s in zip(wanted, found, strict=True)]
        if not apply:
            return
        writes: list[Awaitable[Any]] = []
        for plan, stored in zip(plans, found, strict=True):
            if plan is None:
                continue
            if stored is None:
                writes.append(self.store.create(plan, SINGLE_NODE))
            else:
                writes.append(self.store.save_ceiling(plan.key, plan.ceiling, SINGLE_NODE))
        await asyncio.gather(*writes)  # one loop turn: one transaction per 500

    async def users(self, users: dict[str, str], summary: Summary, apply: bool) -> None:
        for name, rules in users.items():
            stored = await self.store.load_user(name)
            if stored is not None and stored.rules is not None and _user_readable(name, stored.rules):
                summary.users_kept += 1
                continue
            if not apply or await self.store.save_user(name, rules, 0 if stored is None else stored.revision):
                if stored is None:
                    summary.users_created += 1
                else:
                    summary.users_replaced += 1
            else:
                summary.users_kept += 1  # written meanwhile (we hold the lock: nobody should)

    async def workers(self, backup: Backup, summary: Summary, apply: bool) -> None:
        for record in backup.workers:
            stored = await self.store.load_workers(record.namespace, record.id)
            new = _worker_plan(record, stored[0] if stored else None, summary)
            if apply and new is not None:
                await self.store.save_worker(new, stored[0] if stored else None, SINGLE_NODE)
        if apply and backup.workers_retired:
            await asyncio.to_thread(self._raise_retired, backup.workers_retired)

    def _raise_retired(self, floor_ms: int) -> None:
        with sqlite3.connect(self.path, isolation_level=None) as db:  # we hold the data dir's lock
            db.execute(
                "INSERT INTO workers_retired (one, floor_ms) VALUES (1, ?)"
                " ON CONFLICT (one) DO UPDATE SET floor_ms = max(floor_ms, excluded.floor_ms)",
                (floor_ms,),
            )
        db.close()


def _worker_plan(record: WorkerRecord, stored: WorkerRecord | None, summary: Summary) -> WorkerRecord | None:
    if stored is None:
        summary.workers_written += 1
        return WorkerRecord(record.namespace, record.id, b"", 0, record.floor_ms, record.ttl)  # released
    if stored.floor_ms >= record.floor_ms:
        summary.workers_kept += 1
        return None
    summary.workers_written += 1
    return WorkerRecord(stored.namespace, stored.id, stored.token, stored.expires_ms, record.floor_ms, stored.ttl)


PRIMARY_SERVING = (
    "a primary serves this cluster ({}): restore writes to etcd only while no primary serves "
    "(a ceiling raised under a primary would not reach the IDs it holds in memory); "
    "stop the nodes, or raise the floors through the primary with --through HOST:PORT"
)


class _EtcdWriter:
    """Direct etcd transactions, each one compared against a leader key (there must be none)."""

    def __init__(self, etcd: Etcd, keys: KeyPaths, timeout: float) -> None:
        self.etcd, self.keys, self.timeout = etcd, keys, timeout

    async def open(self) -> None:
        found = await self.etcd.range(Get(self.keys.leader, self._leaders_end, limit=1), self.timeout)
        if found.kvs:
            raise BackupError(PRIMARY_SERVING.format(found.kvs[0].value.decode(errors="replace")))

    @property
    def _leaders_end(self) -> bytes:
        # Every leader key of every layout (``<prefix>/leader``, ``<prefix>/leader/<g>-of-<N>``) and
        # every hand-off key starts with ``<prefix>/leader``: one range compare covers every group.
        return prefix_end(self.keys.leader)

    async def close(self) -> None:
        pass

    async def _txn(self, compares: list[Any], ops: list[Request]) -> bool:
        """Run ``ops`` if no leader key of any group exists and ``compares`` hold; False when a compare failed."""
        leaders = Get(self.keys.leader, self._leaders_end, limit=1)
        no_leader = none_in(self.keys.leader, self._leaders_end)
        reply = await self.etcd.txn([no_leader, *compares], ops, [leaders], self.timeout)
        if reply.succeeded:
            return True
        found = reply.ranges[0]
        if found is not None and found.kvs:
            raise BackupError(PRIMARY_SERVING.format(found.kvs[0].value.decode(errors="replace")))
        return False

    async def sequences(self, wanted: list[SequenceRecord], summary: Summary, apply: bool) -> None:
        for start in range(0, len(wanted), WRITE_BATCH):
            await self._sequences(wanted[start : start + WRITE_BATCH], summary, apply)

    async def _sequences(self, wanted: list[SequenceRecord], summary: Summary, apply: bool) -> None:
        for _ in range(10):  # a key changed between the read and the write: read it again
            seqs = [self.keys.seq(r.key) for r in wanted]
            reply = await self.etcd.txn([], [Get(s) for s in seqs], [], self.timeout)
            trial = Summary()
            compares: list[Any] = []
            ops: list[Request] = []
            for record, seq, found in zip(wanted, seqs, reply.ranges, strict=True):
                kv = found.kvs[0] if found is not None and found.kvs else None
                stored = decode_record(record.key, kv.value) if kv is not None else None
                plan = _plan(record, stored, trial)
                if plan is None:
                    continue
                compares.append(created_at(seq, 0) if kv is None else value_is(seq, kv.value))
                ops.append(Put(seq, encode_record(plan)))
            if not apply or not ops or await self._txn(compares, ops):
                _merge(summary, trial)
                return
        raise BackupError("sequences kept changing during the restore (is a node serving?)")

    async def users(self, users: dict[str, str], summary: Summary, apply: bool) -> None:
        for name, rules in users.items():
            key = self.keys.user(name)
            found = await self.etcd.get(key, self.timeout)
            if found is not None and _user_readable(name, found.value.decode("utf-8", "replace")):
                summary.users_kept += 1
                continue
            compare = created_at(key, 0) if found is None else value_is(key, found.value)  # (unreadable: replaced)
            if not apply or await self._txn([compare], [Put(key, rules.encode())]):
                if found is None:
                    summary.users_created += 1
                else:
                    summary.users_replaced += 1
            else:
                summary.users_kept += 1  # written meanwhile: that one holds

    async def workers(self, backup: Backup, summary: Summary, apply: bool) -> None:
        for record in backup.workers:
            key = self.keys.worker(record.namespace, record.id)
            for _ in range(10):
                found = await self.etcd.get(key, self.timeout)
                stored = decode_worker(record.namespace, record.id, found.value) if found is not None else None
                trial = Summary()
                new = _worker_plan(record, stored, trial)
                compare = created_at(key, 0) if found is None else value_is(key, found.value)
                if not apply or new is None or await self._txn([compare], [Put(key, encode_worker(new))]):
                    _merge(summary, trial)
                    break
            else:
                raise BackupError(f"worker record {key!r} kept changing during the restore")
        if apply and backup.workers_retired:
            key = self.keys.workers_retired
            for _ in range(10):
                found = await self.etcd.get(key, self.timeout)
                if found is not None and int(found.value) >= backup.workers_retired:
                    break
                compare = created_at(key, 0) if found is None else value_is(key, found.value)
                if await self._txn([compare], [Put(key, encode_ceiling(backup.workers_retired))]):
                    break


def _merge(into: Summary, part: Summary) -> None:
    into.created += part.created
    into.raised += part.raised
    into.unchanged += part.unchanged
    into.skipped.extend(part.skipped)
    into.users_created += part.users_created
    into.users_kept += part.users_kept
    into.users_replaced += part.users_replaced
    into.workers_written += part.workers_written
    into.workers_kept += part.workers_kept


class _NothingStored:
    """A dry run against a data dir that holds no store yet: everything would be created (and the
    dry run creates no data dir)."""

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def sequences(self, wanted: list[SequenceRecord], summary: Summary, apply: bool) -> None:
        for record in wanted:
            _plan(record, None, summary)

    async def users(self, users: dict[str, str], summary: Summary, apply: bool) -> None:
        summary.users_created += len(users)

    async def workers(self, backup: Backup, summary: Summary, apply: bool) -> None:
        summary.workers_written += len(backup.workers)


Writer = _SqliteWriter | _EtcdWriter | _NothingStored


async def write_sequences(
    writer: Writer, records: list[SequenceRecord], summary: Summary, apply: bool, label: str
) -> None:
    progress = Progress(len(records), label)
    for start in range(0, len(records), PAGE):
        page = records[start : start + PAGE]
        await writer.sequences(page, summary, apply)
        progress.add(len(page))


async def restore(writer: Writer, backup: Backup, apply: bool = True) -> Summary:
    summary = Summary()
    await write_sequences(writer, backup.sequences, summary, apply, "restore")
    await writer.users(backup.users, summary, apply)
    await writer.workers(backup, summary, apply)
    return summary


# --- import-floors: where the floors come from --------------------------------------------------


def _optional(name: str) -> Any:
    """An optional dependency (``march[migrate]``), imported only by the source that needs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise BackupError(f"this needs the {name} package: pip install 'march[migrate]'") from None


def floor_record(key: bytes, max_id: int, where: str, checks: Checks) -> SequenceRecord:
    """A new sequence whose first ID is ``max_id + 1``."""
    if not 0 <= max_id <= MAX_ID:
        raise BackupError(f"{where}: {max_id} is out of range (0 .. {MAX_ID})")
    return SequenceRecord(checks.key(key, where), "sequence", max_id + 1, {})


def _parse_int(text: str, where: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise BackupError(f"{where}: {text.strip()!r} is not an integer") from None


def floors_from_csv(stream: Iterable[str], checks: Checks) -> list[SequenceRecord]:
    """``key,max_id`` rows (a header row ``key,max_id`` is allowed); every row checked first."""
    floors: dict[bytes, SequenceRecord] = {}
    for number, row in enumerate(csv.reader(stream), 1):
        where = f"line {number}"
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if number == 1 and [c.strip().lower() for c in row] == ["key", "max_id"]:
            continue
        if len(row) != 2:
            raise BackupError(f"{where}: expected key,max_id (got {len(row)} fields)")
        key = row[0].encode()
        if not key:
            raise BackupError(f"{where}: empty key")
        record = floor_record(key, _parse_int(row[1], where), where, checks)
        if key not in floors or floors[key].ceiling < record.ceiling:
            floors[key] = record
    checks.count(len(floors))
    return list(floors.values())


def floors_from_table(dsn: str, table: str, column: str, key: str | None, checks: Checks) -> list[SequenceRecord]:
    """One sequence (``key``, default the table's name) above ``MAX(column)`` of ``table``, read
    through SQLAlchemy (PostgreSQL, MySQL, SQLite: any database it has a driver for)."""
    sa = _optional("sqlalchemy")

    schema, _, name = table.rpartition(".")
    try:
        engine = sa.create_engine(dsn)
    except Exception as exc:
        raise BackupError(f"--dsn: {exc}") from None
    try:
        with engine.connect() as conn:
            query: Any = sa.select(sa.func.max(sa.column(column))).select_from(sa.table(name, schema=schema or None))
            value = conn.execute(query).scalar()
    except Exception as exc:
        raise BackupError(f"reading MAX({column}) of {table}: {str(exc).splitlines()[0]}") from None
    finally:
        engine.dispose()
    where = f"{table}.{column}"
    if value is None:
        value = 0  # an empty table: nothing used yet
    if not isinstance(value, int) or isinstance(value, bool):
        value = _parse_int(str(value), where)
    return [floor_record((key or name).encode(), value, where, checks)]


def floors_from_redis(url: str, checks: Checks) -> tuple[list[SequenceRecord], int]:
    """Every string key of a running Redis whose value is an integer (SCAN, never KEYS; values read
    a page at a time with MGET), and how many keys were left out (other types, non-integers)."""
    redis = _optional("redis")

    client: Any = redis.Redis.from_url(url)
    floors: list[SequenceRecord] = []
    left_out = 0
    try:
        cursor = 0
        while True:
            cursor, keys = client.scan(cursor, count=PAGE)
            if keys:
                types = client.pipeline(transaction=False)
                for k in keys:
                    types.type(k)
                strings = [k for k, t in zip(keys, types.execute(), strict=True) if t == b"string"]
                left_out += len(keys) - len(strings)
                values = client.mget(strings) if strings else []
                for k, v in zip(strings, values, strict=True):
                    if v is None or not v.strip().lstrip(b"-").isdigit():
                        left_out += 1
                        continue
                    n = int(v)
                    if n < 0:
                        left_out += 1
                        continue
                    floors.append(floor_record(bytes(k), n, f"redis key {_shown(bytes(k))}", checks))
            if cursor == 0:
                break
    except redis.RedisError as exc:
        raise BackupError(f"--from-redis {url}: {exc}") from None
    finally:
        client.close()
    checks.count(len(floors))
    return floors, left_out


# --- the commands ------------------------------------------------------------------------------


def _etcd(config: Config) -> Etcd:
    return etcd_client(config, "backup")  # the same client a node makes (endpoints, TLS, user)


async def run_backup(config: Config, target: str) -> Counts:
    reader: _SqliteReader | _EtcdReader
    etcd: Etcd | None = None
    if config.cluster:
        etcd = _etcd(config)
        reader = _EtcdReader(etcd, KeyPaths.of(config.etcd_prefix), config.store_timeout)
        source = f"etcd {config.etcd_prefix}"
    else:
        reader = _SqliteReader(config.data_dir)
        source = "sqlite"
    try:
        if target == "-":
            return await write_backup(reader, sys.stdout, source)
        tmp = Path(target + ".partial")
        with open(tmp, "w", encoding="utf-8") as out:
            counts = await write_backup(reader, out, source)
            os.fsync(out.fileno())
        tmp.replace(target)  # a backup file exists only whole
        return counts
    except OSError as exc:
        raise BackupError(f"{target}: {exc.strerror or exc}") from None
    except sqlite3.Error as exc:
        raise BackupError(f"reading {config.data_dir}: {exc}") from None
    finally:
        await reader.close()
        if etcd is not None:
            await etcd.close()


async def with_writer(config: Config, job: Any, apply: bool = True) -> Any:
    """Open the store for writing (SQLite: its lock; etcd: no primary) and run ``job(writer)``."""
    writer: Writer
    etcd: Etcd | None = None
    if not apply and not config.cluster and not (Path(config.data_dir) / SQLITE_FILE).exists():
        writer = _NothingStored()
    elif config.cluster:
        etcd = _etcd(config)
        writer = _EtcdWriter(etcd, KeyPaths.of(config.etcd_prefix), config.store_timeout)
    else:
        writer = _SqliteWriter(config)
    try:
        await writer.open()
        try:
            return await job(writer)
        finally:
            await writer.close()
    finally:
        if etcd is not None:
            await etcd.close()


def read_backup_file(path: str, checks: Checks) -> Backup:
    if path == "-":
        return read_backup(sys.stdin, checks)
    try:
        with open(path, encoding="utf-8") as stream:
            return read_backup(stream, checks)
    except OSError as exc:
        raise BackupError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BackupError(f"{path}: not UTF-8 text") from None


MOVED_HOPS = 2  # a standby names the primary, which serves: more hops mean the cluster is moving


def through_primary(
    address: str, records: list[SequenceRecord], user: str | None, password: str | None, summary: Summary, apply: bool
) -> None:
    """Raise floors through a serving primary: ``SET key ceiling-1`` per sequence-kind record (the
    node's own durable, fenced floor raise). A record already above is left alone (unchanged).

    ``address`` may be any node of the cluster: a key that gets ``MOVED`` is read and written on the
    node named (at most ``MOVED_HOPS`` hops; with leadership groups each key goes to its own group's
    primary), and the first redirect to each node is said on stderr. Errors name the key as text and
    the reply with its kind (``MOVED 13262 127.0.0.1:7382``), never a bytes repr."""
    redis = _optional("redis")  # the CLI is a client of the node here

    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise BackupError(f"--through {address}: expected HOST:PORT")
    first = (host or "127.0.0.1", int(port))
    clients: dict[tuple[str, int], Any] = {}

    def client(node: tuple[str, int]) -> Any:
        if node not in clients:
            if clients:
                print(f"--through {address}: MOVED: sending those keys to {node[0]}:{node[1]}", file=sys.stderr)
            clients[node] = redis.Redis(host=node[0], port=node[1], username=user, password=password, socket_timeout=30)
        return clients[node]

    def get_following_moved(key: bytes, reply: Any) -> tuple[tuple[str, int], Any]:
        node = first
        for _ in range(MOVED_HOPS):
            if not isinstance(reply, redis.exceptions.MovedError):
                break
            node = (reply.host, reply.port)
            try:
                reply = client(node).get(key)
            except redis.exceptions.ResponseError as exc:
                reply = exc
        return node, reply

    progress = Progress(len(records), "floors")
    try:
        for start in range(0, len(records), PAGE):
            page = records[start : start + PAGE]
            wanted = [r for r in page if r.kind == "sequence"]
            summary.skipped.extend(
                f"{r.key!r}: a timestamp sequence (not through a primary)" for r in page if r.kind != "sequence"
            )
            reads = client(first).pipeline(transaction=False)
            for r in wanted:
                reads.get(r.key)
            owners: dict[tuple[str, int], list[SequenceRecord]] = {}
            for r, got in zip(wanted, reads.execute(raise_on_error=False), strict=True):
                node, got = get_following_moved(r.key, got)
                owners.setdefault(node, []).append(r)
                if isinstance(got, Exception):
                    summary.skipped.append(f"{_key_text(r.key)}: {_reply_text(got)}")
                elif got is None:
                    summary.created += 1
                elif int(got) >= r.ceiling - 1:
                    summary.unchanged += 1
                else:
                    summary.raised += 1
            if apply:
                for node, owned in owners.items():
                    sets = client(node).pipeline(transaction=False)
                    for r in owned:
                        sets.set(r.key, r.ceiling - 1)
                    for r, result in zip(owned, sets.execute(raise_on_error=False), strict=True):
                        if isinstance(result, Exception) and "backwards" not in str(result).lower():
                            why = _reply_text(result)
                            again = " (the primary changed meanwhile: run it again)" if why.startswith("MOVED") else ""
                            raise BackupError(
                                f"SET {_key_text(r.key)} {r.ceiling - 1} through {node[0]}:{node[1]}: {why}{again}"
                            )
            progress.add(len(page))
    except redis.RedisError as exc:
        raise BackupError(f"--through {address}: {_reply_text(exc)}") from None
    finally:
        for c in clients.values():
            c.close()


def _key_text(key: bytes) -> str:
    """A sequence name in a message: as text (bytes that are no UTF-8 escaped), quoted, at most 60
    characters (a 2 MB name stays out of the terminal)."""
    text = key.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _reply_text(exc: BaseException) -> str:
    """An error reply as the server sent it: redis-py keeps a redirect's words but drops its kind."""
    name = type(exc).__name__
    kind = {"MovedError": "MOVED", "AskError": "ASK", "TryAgainError": "TRYAGAIN", "ClusterDownError": "CLUSTERDOWN"}
    return f"{kind[name]} {exc}" if name in kind else str(exc)
