"""Histories of ID requests and the checker for DESIGN.md guarantees 1 and 2.

An `Op` is one successful request: which client sent it, when the request was sent, when the
reply arrived (both `time.monotonic_ns()` in this process) and the ID it carried. Requests
that failed or never got a reply are not recorded: they handed out no ID to anyone.

`check_history` verifies, over the whole history of one sequence:
  1. unique: no ID appears twice;
  2. real-time order: if the reply carrying `a` arrived before the request for `b` was sent,
     then `a < b` (this includes "each client's IDs strictly increase", checked on its own
     too for a clearer message);
in O(n log n): sort by send time and by reply time, sweep with the largest ID already
replied.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    client: str
    sent: int  # monotonic_ns just before the request's first byte was written
    replied: int  # monotonic_ns just after the reply was parsed
    id: int


class History:
    """Thread-safe append-only list of `Op`s (one History per sequence/key)."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()

    @staticmethod
    def now() -> int:
        return time.monotonic_ns()

    def record(self, client: str, sent: int, replied: int, id_: int) -> None:
        op = Op(client, sent, replied, id_)
        with self._lock:
            self._ops.append(op)

    def extend(self, ops: list[Op]) -> None:
        with self._lock:
            self._ops.extend(ops)

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)


def check_history(history: History | list[Op], max_report: int = 10) -> dict[str, int]:
    """Raise AssertionError describing the first violations; return a few counts when all is well."""
    ops = history.ops if isinstance(history, History) else list(history)
    problems: list[str] = []

    for op in ops:
        if op.replied < op.sent:
            problems.append(f"reply before request (clock misuse in the test): {op}")

    # 1. uniqueness
    by_id = sorted(ops, key=lambda o: o.id)
    duplicates = 0
    for prev, cur in itertools.pairwise(by_id):
        if prev.id == cur.id:
            duplicates += 1
            if len(problems) < max_report:
                problems.append(f"duplicate ID {cur.id}: {prev} and {cur}")

    # per client: IDs strictly increase in the order the client sent them
    per_client: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        per_client[op.client].append(op)
    decreases = 0
    for client_ops in per_client.values():
        client_ops.sort(key=lambda o: (o.sent, o.replied))
        for prev, cur in itertools.pairwise(client_ops):
            if cur.id <= prev.id:
                decreases += 1
                if len(problems) < max_report:
                    problems.append(f"client {cur.client} went back: {prev.id} then {cur.id} ({prev} -> {cur})")

    # 2. real-time order: sweep requests by send time; `best` is the op with the largest ID
    # among those whose reply arrived strictly before the current request was sent.
    by_reply = sorted(ops, key=lambda o: o.replied)
    by_send = sorted(ops, key=lambda o: o.sent)
    best: Op | None = None
    i = 0
    order_violations = 0
    for b in by_send:
        while i < len(by_reply) and by_reply[i].replied < b.sent:
            if best is None or by_reply[i].id > best.id:
                best = by_reply[i]
            i += 1
        if best is not None and best.id >= b.id:
            order_violations += 1
            if len(problems) < max_report:
                problems.append(
                    f"real-time order broken: ID {best.id} was replied (client {best.client}, t={best.replied}) "
                    f"before ID {b.id} was requested (client {b.client}, t={b.sent})"
                )

    if problems:
        summary = (
            f"history of {len(ops)} ops: {duplicates} duplicates, {decreases} per-client decreases, "
            f"{order_violations} real-time order violations"
        )
        raise AssertionError(summary + "\n  " + "\n  ".join(problems))
    return {"ops": len(ops), "clients": len(per_client), "min_id": by_id[0].id if ops else 0,
            "max_id": by_id[-1].id if ops else 0}  # fmt: skip
