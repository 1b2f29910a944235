"""Timestamp layouts: presets, validation with clear errors, encode/decode round trips and order.

The property tests draw random valid layouts (any widths adding up to at most 63 bits, any field
order with time above seq, any node that fits) and check that decoding inverts encoding, that an
ID of a slot grows with the slot, and that ``first_slot_above`` finds exactly the first slot whose
ID passes a floor (against a brute force on small layouts).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from march import errors
from march.errors import CommandError
from march.generators.bits import PRESETS, Layout, iso, preset

ORDERS = [o for o in itertools.permutations(("time", "node", "seq")) if o.index("time") < o.index("seq")]


@st.composite
def layouts(draw: st.DrawFn, max_bits: int = 63) -> Layout:
    time_bits = draw(st.integers(1, max_bits))
    node_bits = draw(st.integers(0, max_bits - time_bits))
    seq_bits = draw(st.integers(0, max_bits - time_bits - node_bits))
    return Layout(
        time_bits=time_bits,
        node_bits=node_bits,
        seq_bits=seq_bits,
        order=draw(st.sampled_from(ORDERS)),
        epoch=draw(st.integers(0, 2_000_000_000_000)),
        unit=draw(st.sampled_from([1, 10, 1000, 86_400_000])),
        node=draw(st.integers(0, (1 << node_bits) - 1)),
        preset="custom",
    )


@given(layouts(), st.data())
def test_decode_inverts_encode(layout: Layout, data: st.DataObject) -> None:
    t = data.draw(st.integers(0, (1 << layout.time_bits) - 1))
    n = data.draw(st.integers(0, (1 << layout.node_bits) - 1))
    s = data.draw(st.integers(0, (1 << layout.seq_bits) - 1))
    id_ = layout.encode(t, n, s)
    assert 0 <= id_ <= layout.max_id < 1 << 63
    assert layout.decode(id_) == (t, n, s)


@given(layouts(), st.data())
def test_encode_inverts_decode_for_every_id(layout: Layout, data: st.DataObject) -> None:
    id_ = data.draw(st.integers(0, layout.max_id))
    assert layout.encode(*layout.decode(id_)) == id_


@given(layouts(), st.data())
def test_ids_grow_with_slots(layout: Layout, data: st.DataObject) -> None:
    a = data.draw(st.integers(0, layout.slot_top - 2))
    b = data.draw(st.integers(a + 1, layout.slot_top - 1))
    assert layout.id_of(a) < layout.id_of(b)
    t, node, s = layout.decode(layout.id_of(b))
    assert (t << layout.seq_bits | s, node) == (b, layout.node)


@settings(max_examples=60)
@given(layouts(max_bits=9), st.data())
def test_first_slot_above_matches_brute_force(layout: Layout, data: st.DataObject) -> None:
    floor = data.draw(st.integers(-1, layout.max_id + 1))
    expected = next((k for k in range(layout.slot_top) if layout.id_of(k) > floor), None)
    assert layout.first_slot_above(floor) == expected


@given(layouts())
def test_settings_round_trip(layout: Layout) -> None:
    assert Layout.from_settings(layout.to_settings()) == layout


@pytest.mark.parametrize("name", ["snowflake", "sonyflake", "js53"])
def test_every_preset_round_trips_its_extreme_ids(name: str) -> None:
    layout = PRESETS[name]
    for id_ in (0, 1, layout.max_id, layout.max_id - 1, layout.encode(12345, 0, 7)):
        assert layout.encode(*layout.decode(id_)) == id_


def test_presets() -> None:
    snow, sony, js = PRESETS["snowflake"], PRESETS["sonyflake"], PRESETS["js53"]
    assert (snow.time_bits, snow.node_bits, snow.seq_bits, snow.epoch, snow.unit) == (41, 10, 12, 1288834974657, 1)
    assert snow.shifts == {"seq": 0, "node": 12, "time": 22}
    # Twitter's documented example: 1288834974657 ms is the epoch, so time 0 node 0 seq 0 is ID 0, and
    # an ID minted one second later on worker 1 with sequence 5 is 1000 << 22 | 1 << 12 | 5.
    assert snow.encode(1000, 1, 5) == 4194304000 + 4096 + 5
    assert (sony.time_bits, sony.seq_bits, sony.node_bits, sony.unit) == (39, 8, 16, 10)
    assert sony.shifts == {"node": 0, "seq": 16, "time": 24}
    assert iso(sony.epoch) == "2014-09-01T00:00:00.000Z"
    assert js.max_id < 1 << 53
    assert iso(js.ends_ms).startswith("2089-")
    assert iso(snow.ends_ms).startswith("2080-")
    assert preset("SnowFlake") is snow
    assert PRESETS["custom"].preset == "custom"


def test_iso_formatting() -> None:
    assert iso(1288834974657) == "2010-11-04T01:42:54.657Z"
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(-(10**20)) == "0001-01-01T00:00:00.000Z"
    assert iso(10**20) == "9999-12-31T23:59:59.999Z"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"time_bits": 41, "node_bits": 10, "seq_bits": 13}, errors.TS_BITS.format("41+10+13")),
        ({"time_bits": 0}, errors.TS_BITS.format("0+10+12")),
        ({"seq_bits": -1}, errors.TS_BITS.format("41+10+-1")),
        ({"order": ("seq", "node", "time")}, errors.TS_ORDER),
        ({"order": ("time", "seq")}, errors.TS_ORDER),
        ({"order": ("time", "time", "seq")}, errors.TS_ORDER),
        ({"node": 1024}, errors.TS_NODE.format(1024, 10, 1023)),
        ({"node": -1}, errors.TS_NODE.format(-1, 10, 1023)),
        ({"node_bits": 0, "node": 1}, errors.TS_NODE.format(1, 0, 0)),
        ({"unit": 0}, errors.TS_UNIT),
        ({"unit": 86_400_001}, errors.TS_UNIT),
        ({"epoch": -1}, errors.TS_EPOCH),
    ],
)
def test_invalid_layouts_say_why(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(CommandError) as info:
        dataclasses.replace(PRESETS["snowflake"], **changes)
    assert info.value.message == message


def test_unknown_preset() -> None:
    with pytest.raises(CommandError) as info:
        preset("twitter")
    assert info.value.message == errors.TS_PRESET.format("twitter")


def test_new_layouts_are_checked_against_the_clock() -> None:
    now = 1_700_000_000_000
    PRESETS["snowflake"].check_new(now)
    with pytest.raises(CommandError) as info:
        Layout(epoch=now + 1).check_new(now)
    assert info.value.message == errors.TS_EPOCH_FUTURE.format(now + 1, now)
    ended = Layout(time_bits=10, unit=1000, epoch=now - 1024 * 1000)  # 1024 s of time bits, all spent
    with pytest.raises(CommandError) as info:
        ended.check_new(now)
    assert info.value.message == errors.TS_LAYOUT_ENDED.format(iso(now))
    Layout(time_bits=10, unit=1000, epoch=now - 1023 * 1000).check_new(now)  # its last second
