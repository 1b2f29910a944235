"""The compact sequence table: the sequences of a term that are not in use, one small int each.

A sequence in use (a store write in flight, requests waiting, settings of its own, a timestamp
kind, read lately by GET or SEQ.INFO) has a generator (``march.generators``: an object of about
twenty fields, some 300 bytes with its name and dict entry). Every other sequence the term has
touched is a *row* here: its name maps to one int packing ``next`` (the next ID to hand out) and
``room`` (``ceiling - next``, the unspent part of its durable range): ``next << ROOM_BITS | room``.
About 130 bytes a sequence with its name and dict entry.

Why one packed int and not a name -> slot dict over typed arrays: the slot would itself be a
boxed int (32 bytes), as much as the packed row; the arrays would add 16 bytes more. A take makes
a new int in place of the old one (no growth), and is two integer operations.

**Guarantees (docs/architecture.md section 1).** A row is made only from a generator of the current
term that had nothing under way (``SequenceGenerator.park``: no store write in flight, nobody
waiting, no failure, no target above its ceiling), or from the record a creation just stored for a
name with no generator and no row (``Creations._landed``: next 1, its durable ceiling), so ``next +
room`` is at most a durable ceiling and every ID handed out so far is below ``next``; a generator
is retired at the same moment (a reference left anywhere hands out nothing). ``take`` hands out IDs
only below ``next + room``, only while the term's lease is valid (``valid``, the term's own
``Term.valid``), and only while the rest of the range stays at or above the watermark (``low``):
whatever would need a store write is refused, and the caller turns the row back into a generator
(``pop``) that does it. A key is never both a row and a generator: the keyspace removes the row
whenever it makes a generator. The table is emptied when its term ends (its rows' unspent ranges
become gaps, as after a restart). A range longer than ``ROOM`` keeps only ``ROOM`` of it (the rest
is a gap; the generator made from the row learns the stored ceiling again from its first write).

It never reads or writes the store, and never awaits.
"""

from __future__ import annotations

from collections.abc import Callable

# Bits of a row for the unspent range: 2**20 - 1 is more than the default max_batch's range, and
# keeps a row of any ID below 2**40 in a 2-digit int (32 bytes); a longer range keeps this much.
ROOM_BITS = 20
ROOM = (1 << ROOM_BITS) - 1


def _never() -> bool:
    return False


class SequenceTable:
    """Rows of (next, room) by name; see the module docstring."""

    __slots__ = ("issued", "low", "rows", "top", "valid")

    def __init__(self) -> None:
        self.rows: dict[bytes, int] = {}  # name -> next << ROOM_BITS | room
        self.valid: Callable[[], bool] = _never  # the term's ``Term.valid`` (set by the keyspace)
        self.low = 1  # refuse a take that leaves fewer unspent IDs (the default policy's ``low``)
        self.top = 0  # the highest ceiling of a row this term (metrics: how close to the ID maximum)
        self.issued = 0  # IDs handed out from rows, and by generators before they became rows (INFO, metrics)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, key: object) -> bool:
        return key in self.rows

    def take(self, key: bytes, n: int) -> int | None:
        """The last of ``n`` >= 1 consecutive IDs from ``key``'s row; None if it has no row, or if the
        row cannot hand them out without a store write or the lease is not valid (then the caller
        pops the row and takes from a generator)."""
        row = self.rows.get(key)
        if row is not None and (row & ROOM) - n >= self.low and self.valid():
            self.rows[key] = row + (n << ROOM_BITS) - n
            self.issued += n
            return (row >> ROOM_BITS) + n - 1
        return None

    def put(self, key: bytes, next_id: int, ceiling: int) -> None:
        """Keep ``key`` as a row (its generator is being retired by the caller)."""
        self.rows[key] = next_id << ROOM_BITS | min(ROOM, max(0, ceiling - next_id))
        if ceiling > self.top:
            self.top = ceiling

    def pop(self, key: bytes) -> tuple[int, int] | None:
        """Remove ``key``'s row: its (next, ceiling), or None if it has none."""
        row = self.rows.pop(key, None)
        if row is None:
            return None
        next_id = row >> ROOM_BITS
        return next_id, next_id + (row & ROOM)

    def peek(self, key: bytes) -> tuple[int, int] | None:
        """``key``'s (next, ceiling) without removing the row."""
        row = self.rows.get(key)
        return None if row is None else (row >> ROOM_BITS, (row >> ROOM_BITS) + (row & ROOM))

    def clear(self) -> None:
        """Forget every row (the term ended): nothing here may hand out an ID any more."""
        self.valid = _never
        self.rows = {}
        self.top = 0
