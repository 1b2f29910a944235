"""The backup file: JSON lines, one record per line, readable with ``jq``; its writer and its reader.

The first line is the header ``{"format": "march-backup", "version": 1, ...}``; then one line per
record: ``{"type": "sequence", "key", "kind", "ceiling", "settings"}``, ``{"type": "user", "name",
"rules"}`` (passwords only hashed, as stored), ``{"type": "worker", "namespace", "id", "token",
"expires_ms", "floor_ms", "ttl"}``, ``{"type": "workers_retired", "floor_ms"}``; the last line
``{"type": "end", "sequences": n, "users": n, "workers": n}`` says the file is whole (a truncated
file has no end line, or counts that disagree, and is refused). Names that are not UTF-8 are
written as ``key_hex`` / ``namespace_hex`` instead.

``BackupWriter`` turns the records a store exports (``march.store.contract.Exported``) into lines.
``read_backup`` reads a whole file and checks every line (``checks.Checks``: what the live commands
accept) before returning anything, so one bad record refuses the file, naming its line, and nothing
is written: a non-integer or out-of-range number, an unknown version, record type or kind, data
after the end line. A sequence named twice keeps its higher ceiling. Nothing here opens a store.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

from march.backup.checks import BackupError, Checks
from march.config import MAX_ID
from march.generators.sequence import TOP
from march.keyspace.worker_ids import IDS, MAX_TTL
from march.store.contract import Exported, SequenceRecord, UserRecord, WorkerRecord

FORMAT = "march-backup"
VERSION = 1  # bump when a record's meaning changes; restore refuses versions it does not know


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
        "floor_ms": record.upto_ms,
        "ttl": record.ttl,
    }


@dataclass
class Counts:
    """The records a file holds, as its end line counts them."""

    sequences: int = 0
    users: int = 0
    workers: int = 0


class BackupWriter:
    """Lines of one backup file onto ``out``: ``header``, each exported record (``add``), ``end``."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.counts = Counts()

    def _emit(self, line: dict[str, Any]) -> None:
        self.out.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")

    def header(self, source: str) -> None:
        self._emit({"format": FORMAT, "version": VERSION, "source": source, "created_ms": int(time.time() * 1000)})

    def add(self, record: Exported) -> None:
        if isinstance(record, SequenceRecord):
            self._emit(sequence_line(record))
            self.counts.sequences += 1
        elif isinstance(record, UserRecord):
            if record.rules is not None:  # (None only in a watch event: a deleted user)
                self._emit({"type": "user", "name": record.name, "rules": record.rules})
                self.counts.users += 1
        elif isinstance(record, WorkerRecord):
            self._emit(worker_line(record))
            self.counts.workers += 1
        else:
            self._emit({"type": "workers_retired", "floor_ms": record.upto_ms})

    def end(self) -> Counts:
        counts = self.counts
        self._emit({"type": "end", "sequences": counts.sequences, "users": counts.users, "workers": counts.workers})
        self.out.flush()
        return counts


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


def read_backup_file(path: str, checks: Checks) -> Backup:
    """``read_backup`` of the file at ``path`` (``-``: stdin)."""
    if path == "-":
        return read_backup(sys.stdin, checks)
    try:
        with open(path, encoding="utf-8") as stream:
            return read_backup(stream, checks)
    except OSError as exc:
        raise BackupError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BackupError(f"{path}: not UTF-8 text") from None


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
