"""``march backup``, ``march restore`` and ``march import-floors``: a deployment's durable state in
one portable file, and floors taken from the data a team already has. Nothing here runs in a node,
and nothing here knows how a store keeps its records: every read and write goes through the store
contract (``march.store.contract``: ``export``, ``raise_to``, ``restore_users``, ``raise_workers``,
``raise_retired_upto``), on the store the nodes use (the same options as ``march serve``).

**Backup** reads while nodes serve, a page (``PAGE`` records) at a time: SQLite through a store
opened ``read_only`` beside the node (no lock: WAL readers never wait for the node's writer, nor
it for them), etcd through plain range reads. A backup is therefore not one snapshot: every record
in it is one the store held while the backup ran, which is all a restore needs (ceilings only
grow). ``FILE.partial`` is renamed to ``FILE`` once whole.

**Restore** and **import-floors** write only upwards: a sequence that is absent is created with the
file's ceiling and settings; one that exists keeps its kind and settings and its ceiling is raised
to the file's when that is higher, never lowered (so restoring an old backup after more IDs were
issued changes nothing for those sequences and no ID can repeat). A user that exists is kept (its
stored rules are newer than any backup's), unless a node cannot read its stored rules (it keeps
such a user off, ``march.access.stored``): then the file's record replaces it, so restore is also
the way back in when the stored ``default`` is unreadable and no admin can log in. A worker record
that exists keeps its holder and gets the higher ``floor_ms``; an absent one is written released
(token ``""``: no holder survives a restore) with its floor; the retired floor is raised likewise.

Where the writes go: only where no primary serves. SQLite: a stopped node's data dir (opening the
store takes its lock: a running node makes restore fail with the lock's message, nothing written).
etcd: only while no leader key of any group exists; each restore transaction compares that
itself, so a primary elected meanwhile stops the restore (``PrimaryServing``). With a primary
serving, raise floors through it instead: ``--through HOST:PORT`` (``through``).

**Only what the live commands accept.** The whole input is read and checked before anything is
written (``checks.Checks``, ``format.read_backup``), and one bad record refuses it all, naming its
line (or, for import-floors from a table or a Redis, its key). A dry run goes through the same
store calls, which say what they would do and write nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

from march.backup.checks import BackupError, user_readable
from march.backup.format import Backup, BackupWriter, Counts
from march.backup.report import PAGE, Progress, Summary
from march.config import Config
from march.errors import PrimaryServing
from march.etcd.keypath import KeyPaths
from march.node import etcd_client
from march.store.contract import Restored, SequenceRecord, Store, WorkerRecord
from march.store.etcd_store import EtcdStore
from march.store.membership import SQLITE_FILE
from march.store.sqlite_store import SqliteStore

PRIMARY_SERVING = (
    "a primary serves this cluster ({}): restore writes to etcd only while no primary serves "
    "(a ceiling raised under a primary would not reach the IDs it holds in memory); "
    "stop the nodes, or raise the floors through the primary with --through HOST:PORT"
)


@contextlib.asynccontextmanager
async def opened(config: Config, read_only: bool) -> AsyncIterator[Store]:
    """The nodes' store: SQLite in ``data_dir`` (``read_only``: beside a running node; else its lock),
    or etcd under ``etcd_prefix`` with the client a node makes (endpoints, TLS, user)."""
    if not config.cluster:
        store: Store = SqliteStore(config.data_dir, join_other=config.join_other_cluster, read_only=read_only)
        await store.open()
        try:
            yield store
        finally:
            await store.close()
        return
    etcd = etcd_client(config, "backup")
    try:
        store = EtcdStore(etcd, KeyPaths.of(config.etcd_prefix), config.store_timeout)
        try:
            yield store
        finally:
            await store.close()
    finally:
        await etcd.close()


# --- backup -------------------------------------------------------------------------------------


async def write_backup(store: Store, out: IO[str], source: str) -> Counts:
    """Every record of ``store``, a page at a time, as one backup file on ``out``."""
    writer = BackupWriter(out)
    writer.header(source)
    async for page in store.export(PAGE):
        for record in page:
            writer.add(record)
    return writer.end()


async def run_backup(config: Config, target: str) -> Counts:
    """``march backup FILE`` (``-``: stdout)."""
    source = f"etcd {config.etcd_prefix}" if config.cluster else "sqlite"
    async with opened(config, read_only=True) as store:
        if target == "-":
            return await write_backup(store, sys.stdout, source)
        tmp = Path(target + ".partial")
        try:
            with open(tmp, "w", encoding="utf-8") as out:
                counts = await write_backup(store, out, source)
                os.fsync(out.fileno())
            tmp.replace(target)  # a backup file exists only whole
        except OSError as exc:
            raise BackupError(f"{target}: {exc.strerror or exc}") from None
        return counts


# --- restore and import-floors: only upwards ------------------------------------------------------


async def raise_floors(
    store: Store | None, records: list[SequenceRecord], summary: Summary, dry_run: bool, label: str
) -> None:
    """``records`` raised (or created) a page at a time, with a progress bar on a terminal (``store``
    None: a dry run where no store exists yet, so every record would be created)."""
    progress = Progress(len(records), label)
    for start in range(0, len(records), PAGE):
        page = records[start : start + PAGE]
        outcomes = [Restored.CREATED] * len(page) if store is None else await store.raise_to(page, dry_run)
        summary.sequences(page, outcomes)
        progress.add(len(page))


def released(record: WorkerRecord) -> WorkerRecord:
    """A worker record as a restore writes it where none is stored: no holder survives a restore."""
    return WorkerRecord(record.namespace, record.id, b"", 0, record.upto_ms, record.ttl)


async def restore(store: Store | None, backup: Backup, dry_run: bool = False) -> Summary:
    """Everything ``backup`` holds, only raised (see the module docstring; ``store`` None: a dry run
    where no store exists yet)."""
    summary = Summary()
    await raise_floors(store, backup.sequences, summary, dry_run, "restore")
    if store is None:
        summary.users([Restored.CREATED] * len(backup.users))
        summary.workers([Restored.CREATED] * len(backup.workers))
        return summary
    summary.users(await store.restore_users(backup.users, user_readable, dry_run))
    summary.workers(await store.raise_workers([released(w) for w in backup.workers], dry_run))
    if backup.workers_retired:
        await store.raise_retired_upto(backup.workers_retired, dry_run)
    return summary


@contextlib.asynccontextmanager
async def writing(config: Config) -> AsyncIterator[Store]:
    """The nodes' store, for a restore's writes: SQLite under its lock, etcd while no primary serves
    (checked now, and again by every write: a primary elected meanwhile stops it). A serving
    primary is the BackupError that says what to do instead."""
    try:
        async with opened(config, read_only=False) as store:
            primary = await store.serving_primary()
            if primary is not None:
                raise PrimaryServing(primary)
            yield store
    except PrimaryServing as exc:
        raise BackupError(PRIMARY_SERVING.format(exc.primary)) from None


def _nothing_stored(config: Config, dry_run: bool) -> bool:
    """A dry run against a data dir that holds no store yet: everything would be created, and the
    dry run creates no data dir."""
    return dry_run and not config.cluster and not (Path(config.data_dir) / SQLITE_FILE).exists()


async def run_restore(config: Config, backup: Backup, dry_run: bool) -> Summary:
    """``march restore FILE``, the file read and checked whole already."""
    if _nothing_stored(config, dry_run):
        return await restore(None, backup, dry_run)
    async with writing(config) as store:
        return await restore(store, backup, dry_run)


async def run_import(config: Config, records: list[SequenceRecord], dry_run: bool) -> Summary:
    """``march import-floors``, every record read and checked already."""
    summary = Summary()
    if _nothing_stored(config, dry_run):
        await raise_floors(None, records, summary, dry_run, "floors")
        return summary
    async with writing(config) as store:
        await raise_floors(store, records, summary, dry_run, "floors")
    return summary
