"""Timestamp ID layouts: which bits of an ID hold the time, the node and the sequence.

An ID is three unsigned fields packed from bit 0 upwards, in the order ``order`` names them from
the most significant down (``time,node,seq`` is Twitter's snowflake: 41 | 10 | 12 bits):

- ``time``: whole ``unit``s (milliseconds each) since ``epoch`` (milliseconds since 1970, UTC);
- ``node``: a fixed number per sequence (the machine/worker id of older generators);
- ``seq``: the position within one time unit.

The time field must sit above the sequence field, so that for a fixed node IDs grow with
(time, seq). The generator counts in *slots*: ``slot = time << seq_bits | seq``; ``id_of(slot)`` is
increasing in the slot, and a sequence overflow is just the next slot (the next time unit, seq 0).

Presets (``PRESETS``):

- ``snowflake``: 41-bit milliseconds, 10-bit node, 12-bit sequence, epoch 1288834974657 (Twitter).
- ``sonyflake``: 39 bits of 10 ms, 8-bit sequence, 16-bit machine id below it, epoch 2014-09-01.
- ``js53``: 41-bit milliseconds and a 12-bit sequence, no node field, epoch 2020-01-01: every ID
  is below 2^53, so JavaScript's numbers hold it exactly (until the year 2089).

A layout is stored with its sequence as plain ints and strings (``to_settings``); a stored layout
is not checked against the clock again (``from_settings``), only a new one is (``check_new``).
This module never reads a clock itself: callers pass the time.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from march import errors
from march.errors import CommandError

FIELDS = ("time", "node", "seq")
ID_BITS = 63  # IDs are non-negative signed 64-bit integers, as Redis INCR replies are
MAX_UNIT_MS = 86_400_000  # one day: a coarser unit makes a useless ID


@dataclass(frozen=True)
class Layout:
    time_bits: int = 41
    node_bits: int = 10
    seq_bits: int = 12
    order: tuple[str, ...] = ("time", "node", "seq")  # most significant first
    epoch: int = 1288834974657  # ms since 1970-01-01T00:00:00Z
    unit: int = 1  # ms per time unit
    node: int = 0
    preset: str = "snowflake"
    # derived (filled in __post_init__)
    shifts: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_shape()
        shifts: dict[str, int] = {}
        at = 0
        for name in reversed(self.order):
            shifts[name] = at
            at += self.bits(name)
        object.__setattr__(self, "shifts", shifts)

    # --- shape -----------------------------------------------------------------------------------

    def bits(self, name: str) -> int:
        return {"time": self.time_bits, "node": self.node_bits, "seq": self.seq_bits}[name]

    @property
    def total_bits(self) -> int:
        return self.time_bits + self.node_bits + self.seq_bits

    @property
    def max_id(self) -> int:
        return (1 << self.total_bits) - 1

    @property
    def time_top(self) -> int:
        """Exclusive bound of the time field: the layout runs out of time bits here."""
        return 1 << self.time_bits

    @property
    def slot_top(self) -> int:
        """Exclusive bound of slots (time, seq)."""
        return 1 << (self.time_bits + self.seq_bits)

    def _check_shape(self) -> None:
        described = f"{self.time_bits}+{self.node_bits}+{self.seq_bits}"
        if self.time_bits < 1 or self.node_bits < 0 or self.seq_bits < 0 or self.total_bits > ID_BITS:
            raise CommandError(errors.TS_BITS.format(described))
        order = tuple(self.order)
        if sorted(order) != sorted(FIELDS) or order.index("time") > order.index("seq"):
            raise CommandError(errors.TS_ORDER)
        if not 1 <= self.unit <= MAX_UNIT_MS:
            raise CommandError(errors.TS_UNIT)
        if self.epoch < 0:
            raise CommandError(errors.TS_EPOCH)
        if not 0 <= self.node < 1 << self.node_bits:
            raise CommandError(errors.TS_NODE.format(self.node, self.node_bits, (1 << self.node_bits) - 1))

    def check_new(self, now_ms: int) -> None:
        """A layout for a new sequence: its epoch has passed and its time bits have not run out."""
        if self.epoch > now_ms:
            raise CommandError(errors.TS_EPOCH_FUTURE.format(self.epoch, now_ms))
        if self.units_at(now_ms) >= self.time_top:
            raise CommandError(errors.TS_LAYOUT_ENDED.format(iso(self.ends_ms)))

    # --- time ------------------------------------------------------------------------------------

    def units_at(self, ms: int) -> int:
        """The time field for a wall-clock instant (0 before the epoch)."""
        return max(0, (ms - self.epoch) // self.unit)

    def ms_of(self, units: int) -> int:
        return self.epoch + units * self.unit

    @property
    def ends_ms(self) -> int:
        """The instant the time field overflows: no ID can carry a time at or after it."""
        return self.ms_of(self.time_top)

    # --- IDs -------------------------------------------------------------------------------------

    def encode(self, time: int, node: int, seq: int) -> int:
        s = self.shifts
        return (time << s["time"]) | (node << s["node"]) | (seq << s["seq"])

    def decode(self, id_: int) -> tuple[int, int, int]:
        """(time, node, seq) of an ID; the caller checks 0 <= id <= max_id."""
        s = self.shifts
        return (
            (id_ >> s["time"]) & ((1 << self.time_bits) - 1),
            (id_ >> s["node"]) & ((1 << self.node_bits) - 1),
            (id_ >> s["seq"]) & ((1 << self.seq_bits) - 1),
        )

    def id_of(self, slot: int) -> int:
        """This layout's node's ID for a slot (time << seq_bits | seq); increasing in the slot."""
        return self.encode(slot >> self.seq_bits, self.node, slot & ((1 << self.seq_bits) - 1))

    def first_slot_above(self, floor: int) -> int | None:
        """The smallest slot whose ID (for this node) is > ``floor``; None if there is none.

        A binary search, since ``id_of`` increases with the slot: it is exact whatever the order
        of the fields and whatever node wrote ``floor`` (a floor from node 7 in a layout where
        the node field sits above the sequence needs the next time unit for node 0).
        """
        lo, hi = 0, self.slot_top  # answer in [lo, hi]; hi means "none"
        while lo < hi:
            mid = (lo + hi) // 2
            if self.id_of(mid) > floor:
                hi = mid
            else:
                lo = mid + 1
        return None if lo == self.slot_top else lo

    # --- storage ---------------------------------------------------------------------------------

    def to_settings(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "time_bits": self.time_bits,
            "node_bits": self.node_bits,
            "seq_bits": self.seq_bits,
            "order": ",".join(self.order),
            "epoch": self.epoch,
            "unit": self.unit,
            "node": self.node,
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Layout:
        return cls(
            time_bits=int(settings["time_bits"]),
            node_bits=int(settings["node_bits"]),
            seq_bits=int(settings["seq_bits"]),
            order=tuple(str(settings["order"]).split(",")),
            epoch=int(settings["epoch"]),
            unit=int(settings["unit"]),
            node=int(settings.get("node", 0)),
            preset=str(settings.get("preset", "custom")),
        )

    def describe(self) -> str:
        """``time:41,node:10,seq:12``: the fields from the most significant down."""
        return ",".join(f"{name}:{self.bits(name)}" for name in self.order)


PRESETS: dict[str, Layout] = {
    "snowflake": Layout(),
    # Sonyflake's own defaults: start time 2014-09-01T00:00:00Z, sequence above the machine id.
    "sonyflake": Layout(39, 16, 8, ("time", "seq", "node"), 1409529600000, 10, preset="sonyflake"),
    # 41 + 12 = 53 bits: every ID < 2^53 (Number.MAX_SAFE_INTEGER + 1) until 2089.
    "js53": Layout(41, 0, 12, ("time", "node", "seq"), 1577836800000, 1, preset="js53"),
}
PRESETS["custom"] = replace(PRESETS["snowflake"], preset="custom")


def preset(name: str) -> Layout:
    found = PRESETS.get(name.lower())
    if found is None:
        raise CommandError(errors.TS_PRESET.format(name))
    return found


def iso(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2010-11-04T01:42:54.657Z`` (clamped to years 1..9999)."""
    ms = min(max(ms, _ISO_MIN), _ISO_MAX)
    dt = _UNIX_EPOCH + datetime.timedelta(milliseconds=ms)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_UNIX_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ISO_MIN = -62135596800000  # 0001-01-01T00:00:00.000Z
_ISO_MAX = 253402300799999  # 9999-12-31T23:59:59.999Z
