"""Histories of ID requests and the checker for guarantees 1 and 2 (docs/architecture.md).

An `Op` is one successful request: which client sent it, when the request was sent, when the
reply arrived (both `time.monotonic_ns()` in this process), the ID it carried and, where the
client knows it, which node (host:port) answered. A `Failure` is a request that got an error
or no reply at all: it handed out no ID to anyone, so the checker ignores it; drills count
failures for their figures (error count and window).

`analyze` counts, over the whole history of one sequence:
  1. duplicates: an ID appearing twice;
  2. real-time order violations: the reply carrying `a` arrived before the request for `b` was
     sent, yet `a >= b` (this includes "each client's IDs strictly increase", counted on its
     own too for a clearer message);
in O(n log n): sort by send time and by reply time, sweep with the largest ID already
replied. `check_history` raises AssertionError describing the first violations.

With leadership groups (issue 17), a key's group is the one whose slot range holds the key's
slot (`group_of_key`: group g of N owns slots ``g*16384//N .. (g+1)*16384//N - 1``, the shared
layout); `analyze_groups` adds the per-key analyses up per group, so a drill reports its
duplicates and order violations group by group. The guarantees stay per key: a group's figures
are sums over its keys, never one history across keys (different keys' IDs may interleave).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from march.cluster.slots import SLOTS, key_slot


@dataclass(frozen=True, slots=True)
class Op:
    client: str
    sent: int  # monotonic_ns just before the request's first byte was written
    replied: int  # monotonic_ns just after the reply was parsed
    id: int
    node: str = ""  # host:port that answered, where the client knows it


@dataclass(frozen=True, slots=True)
class Failure:
    client: str
    sent: int
    replied: int  # when the error reply, timeout or connection loss was seen
    error: str  # e.g. "TRYAGAIN ...", "ConnectionError: ..."
    node: str = ""


class History:
    """Thread-safe append-only lists of `Op`s and `Failure`s (one History per sequence/key)."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._failures: list[Failure] = []
        self._lock = threading.Lock()

    @staticmethod
    def now() -> int:
        return time.monotonic_ns()

    def record(self, client: str, sent: int, replied: int, id_: int, node: str = "") -> None:
        op = Op(client, sent, replied, id_, node)
        with self._lock:
            self._ops.append(op)

    def record_error(self, client: str, sent: int, replied: int, error: str, node: str = "") -> None:
        failure = Failure(client, sent, replied, error, node)
        with self._lock:
            self._failures.append(failure)

    def extend(self, ops: list[Op]) -> None:
        with self._lock:
            self._ops.extend(ops)

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def ops_from(self, index: int) -> list[Op]:
        """The ops recorded after the first ``index`` ones (for incremental scans)."""
        with self._lock:
            return self._ops[index:]

    @property
    def failures(self) -> list[Failure]:
        with self._lock:
            return list(self._failures)

    def __len__(self) -> int:
        """Successful requests only, as before failures were recorded."""
        with self._lock:
            return len(self._ops)


@dataclass
class Analysis:
    ops: int = 0
    clients: int = 0
    min_id: int = 0
    max_id: int = 0
    duplicates: int = 0
    decreases: int = 0  # per-client: a client's later request got a smaller or equal ID
    order_violations: int = 0  # across clients, real-time order
    clock_misuse: int = 0  # an op replied before it was sent: a bug in the test
    problems: list[str] = field(default_factory=list)  # the first few, described

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.decreases or self.order_violations or self.clock_misuse)

    def summary(self) -> str:
        return (
            f"history of {self.ops} ops: {self.duplicates} duplicates, {self.decreases} per-client decreases, "
            f"{self.order_violations} real-time order violations"
        )


def analyze(history: History | list[Op], max_report: int = 10) -> Analysis:
    """Count every violation of guarantees 1 and 2; describe the first ``max_report``."""
    ops = history.ops if isinstance(history, History) else list(history)
    a = Analysis(ops=len(ops))

    def problem(text: str) -> None:
        if len(a.problems) < max_report:
            a.problems.append(text)

    for op in ops:
        if op.replied < op.sent:
            a.clock_misuse += 1
            problem(f"reply before request (clock misuse in the test): {op}")

    # 1. uniqueness
    by_id = sorted(ops, key=lambda o: o.id)
    for prev, cur in itertools.pairwise(by_id):
        if prev.id == cur.id:
            a.duplicates += 1
            problem(f"duplicate ID {cur.id}: {prev} and {cur}")

    # per client: IDs strictly increase in the order the client sent them
    per_client: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        per_client[op.client].append(op)
    for client_ops in per_client.values():
        client_ops.sort(key=lambda o: (o.sent, o.replied))
        for prev, cur in itertools.pairwise(client_ops):
            if cur.id <= prev.id:
                a.decreases += 1
                problem(f"client {cur.client} went back: {prev.id} then {cur.id} ({prev} -> {cur})")

    # 2. real-time order: sweep requests by send time; `best` is the op with the largest ID
    # among those whose reply arrived strictly before the current request was sent.
    by_reply = sorted(ops, key=lambda o: o.replied)
    by_send = sorted(ops, key=lambda o: o.sent)
    best: Op | None = None
    i = 0
    for b in by_send:
        while i < len(by_reply) and by_reply[i].replied < b.sent:
            if best is None or by_reply[i].id > best.id:
                best = by_reply[i]
            i += 1
        if best is not None and best.id >= b.id:
            a.order_violations += 1
            problem(
                f"real-time order broken: ID {best.id} was replied (client {best.client}, t={best.replied}) "
                f"before ID {b.id} was requested (client {b.client}, t={b.sent})"
            )

    a.clients = len(per_client)
    if ops:
        a.min_id, a.max_id = by_id[0].id, by_id[-1].id
    return a


def check_history(history: History | list[Op], max_report: int = 10) -> dict[str, int]:
    """Raise AssertionError describing the first violations; return a few counts when all is well."""
    a = analyze(history, max_report)
    if not a.ok:
        raise AssertionError(a.summary() + "\n  " + "\n  ".join(a.problems))
    return {"ops": a.ops, "clients": a.clients, "min_id": a.min_id, "max_id": a.max_id}


# -- leadership groups ---------------------------------------------------------------------------


def group_slots(group: int, groups: int) -> tuple[int, int]:
    """The first and last slot of ``group`` of ``groups`` (the shared layout's contiguous ranges)."""
    return group * SLOTS // groups, (group + 1) * SLOTS // groups - 1


def group_of_slot(slot: int, groups: int) -> int:
    """The group whose range holds ``slot``: the largest g with ``g*SLOTS//groups <= slot``."""
    g = slot * groups // SLOTS
    while group_slots(g, groups)[0] > slot:  # floor rounding may overshoot by one
        g -= 1
    while group_slots(g, groups)[1] < slot:
        g += 1
    return g


def group_of_key(key: str | bytes, groups: int) -> int:
    """The group that serves ``key`` (0 with one group: no slot is computed)."""
    if groups == 1:
        return 0
    return group_of_slot(key_slot(key.encode() if isinstance(key, str) else key), groups)


def analyze_groups(histories: dict[str, History], groups: int, max_report: int = 10) -> dict[int, Analysis]:
    """Each key analysed on its own (the guarantees are per key), the counts added up per group;
    the problems are prefixed with their key. Every group gets an entry, keys or not."""
    out = {g: Analysis() for g in range(groups)}
    for key, h in histories.items():
        a = analyze(h, max_report)
        total = out[group_of_key(key, groups)]
        total.ops += a.ops
        total.clients += a.clients
        total.duplicates += a.duplicates
        total.decreases += a.decreases
        total.order_violations += a.order_violations
        total.clock_misuse += a.clock_misuse
        total.problems += [f"{key}: {p}" for p in a.problems][: max(0, max_report - len(total.problems))]
        if a.ops:
            total.min_id = min(total.min_id, a.min_id) if total.ops != a.ops else a.min_id
            total.max_id = max(total.max_id, a.max_id)
    return out
