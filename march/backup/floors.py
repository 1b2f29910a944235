"""Where ``march import-floors`` takes floors from: a CSV of ``key,max_id``, a database table's
``MAX(column)`` (through SQLAlchemy), or a running Redis's integer keys. Each becomes a new plain
sequence's record whose first ID is above the floor (``floor_record``); every row or key is checked
(``checks.Checks``) before anything is written, and a key given twice keeps its higher floor.
Nothing here opens March's store: ``operations`` writes what these return.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any

from march.backup.checks import BackupError, Checks, optional, shown
from march.backup.report import PAGE
from march.config import MAX_ID
from march.store.contract import SequenceRecord


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
    sa = optional("sqlalchemy")

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
    redis = optional("redis")

    client: Any = redis.Redis.from_url(url)
    floors: dict[bytes, SequenceRecord] = {}  # SCAN may return a key twice: once here
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
                    floors[bytes(k)] = floor_record(bytes(k), n, f"redis key {shown(bytes(k))}", checks)
            if cursor == 0:
                break
    except redis.RedisError as exc:
        raise BackupError(f"--from-redis {url}: {exc}") from None
    finally:
        client.close()
    checks.count(len(floors))
    return list(floors.values()), left_out
