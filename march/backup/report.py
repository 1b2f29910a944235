"""What a restore or an import says it did (``Summary``), and its progress bar on a terminal.

``Summary`` counts what the store's restore writes answered (``march.store.contract.Restored``),
or, in a dry run, what they would do, and prints it as the lines ``march restore`` and ``march
import-floors`` end with. Nothing here reads or writes a store.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from march.store.contract import Restored, SequenceRecord

PAGE = 1000  # records per step (a page read or written, a progress step): one short store call each
PROGRESS_MIN = 5000  # jobs at least this large show a progress bar (on a terminal only)
SKIPPED_SHOWN = 20  # the skipped records named in the summary; the rest are counted


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

    def sequences(self, records: list[SequenceRecord], outcomes: list[Restored]) -> None:
        for record, outcome in zip(records, outcomes, strict=True):
            if outcome is Restored.CREATED:
                self.created += 1
            elif outcome is Restored.RAISED:
                self.raised += 1
            elif outcome is Restored.UNCHANGED:
                self.unchanged += 1
            else:  # two kinds exist: it is stored as the other one
                stored = "timestamp" if record.kind == "sequence" else "sequence"
                self.skipped.append(f"{record.key!r}: stored as a {stored}, the input says {record.kind}")

    def users(self, outcomes: list[Restored]) -> None:
        self.users_created += outcomes.count(Restored.CREATED)
        self.users_kept += outcomes.count(Restored.UNCHANGED)
        self.users_replaced += outcomes.count(Restored.REPLACED)

    def workers(self, outcomes: list[Restored]) -> None:
        self.workers_kept += outcomes.count(Restored.UNCHANGED)
        self.workers_written += len(outcomes) - outcomes.count(Restored.UNCHANGED)

    def lines(self, applied: bool) -> list[str]:
        verb = "" if applied else "would be "
        out = [f"sequences: {self.created} {verb}created, {self.raised} {verb}raised, {self.unchanged} unchanged"]
        if self.users_created or self.users_kept or self.users_replaced:
            replaced = f", {self.users_replaced} {verb}replaced (stored unreadable)" if self.users_replaced else ""
            out.append(f"users: {self.users_created} {verb}created, {self.users_kept} kept as stored{replaced}")
        if self.workers_written or self.workers_kept:
            out.append(f"worker records: {self.workers_written} {verb}written, {self.workers_kept} unchanged")
        out.extend(f"skipped {s}" for s in self.skipped[:SKIPPED_SHOWN])
        if len(self.skipped) > SKIPPED_SHOWN:
            out.append(f"... and {len(self.skipped) - SKIPPED_SHOWN} more skipped")
        return out


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
