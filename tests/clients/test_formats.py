"""march_client.formats: every encoder round-trips exactly (hypothesis), sortable forms sort like
the numbers, and the keyed permutation is a bijection (checked exhaustively on small widths)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from march_client import formats as f

ids = st.integers(min_value=0, max_value=2**63 - 1)
keys = st.binary(min_size=16, max_size=100)
KEY = b"an example key, 32 bytes long..."


@given(ids, st.none() | st.integers(min_value=11, max_value=20))
def test_base62_round_trip(value: int, width: int | None) -> None:
    text = f.base62_encode(value, width)
    assert f.base62_decode(text) == value
    assert set(text) <= set(f.BASE62)
    if width is not None:
        assert len(text) == width


@given(ids, ids)
def test_padded_forms_sort_like_the_numbers(a: int, b: int) -> None:
    assert (f.base62_encode(a, f.BASE62_WIDTH_64) < f.base62_encode(b, f.BASE62_WIDTH_64)) == (a < b)
    assert (f.fixed_width(a) < f.fixed_width(b)) == (a < b)


def test_base62_examples_and_errors() -> None:
    assert f.base62_encode(0) == "0"
    assert f.base62_encode(61) == "z"
    assert f.base62_encode(62) == "10"
    assert f.base62_encode(2**64 - 1, f.BASE62_WIDTH_64)  # fits
    with pytest.raises(ValueError, match="more than 2 digits"):
        f.base62_encode(62**2, 2)
    for bad in ("", "ab-c", "é"):
        with pytest.raises(ValueError, match="not a base62"):
            f.base62_decode(bad)
    with pytest.raises(ValueError, match="non-negative"):
        f.base62_encode(-1)


@given(ids)
def test_fixed_width_round_trip(value: int) -> None:
    text = f.fixed_width(value)
    assert len(text) == 19 and f.parse_fixed(text) == value


def test_fixed_width_errors() -> None:
    with pytest.raises(ValueError, match="more than 3 digits"):
        f.fixed_width(1000, 3)
    with pytest.raises(ValueError, match="decimal"):
        f.parse_fixed("12a")
    with pytest.raises(ValueError, match="decimal"):
        f.parse_fixed("")


@given(st.integers(min_value=0, max_value=10**7 - 1), st.dates(min_value=dt.date(1000, 1, 1)))
def test_dated_round_trip(value: int, day: dt.date) -> None:
    text = f.dated(value, day)
    assert len(text) == 16
    assert f.parse_dated(text) == (day, value)


def test_dated_example_and_width() -> None:
    assert f.dated(123, dt.date(2026, 11, 23)) == "20261123-0000123"
    assert f.dated(123, dt.date(2026, 11, 23), width=3) == "20261123-123"
    with pytest.raises(ValueError, match="more than 7 digits"):
        f.dated(10**7, dt.date(2026, 11, 23))  # a longer number would break the sort order
    for bad in ("2026112-0001", "20261323-0001", "20261123_0001", "20261123-"):
        with pytest.raises(ValueError, match="not a dated ID"):
            f.parse_dated(bad)


@given(st.lists(st.tuples(st.dates(min_value=dt.date(1000, 1, 1)), st.integers(0, 10**7 - 1)), max_size=20))
def test_dated_strings_sort_by_day_then_id(items: list[tuple[dt.date, int]]) -> None:
    assert sorted(f.dated(v, d) for d, v in items) == [f.dated(v, d) for d, v in sorted(items)]


@given(ids, st.text(max_size=5), st.text(max_size=5), st.booleans())
def test_affix_round_trip(value: int, prefix: str, suffix: str, base62: bool) -> None:
    text = f.with_affix(value, prefix, suffix, base62=base62)
    assert text.startswith(prefix) and text.endswith(suffix)
    assert f.strip_affix(text, prefix, suffix, base62=base62) == value


def test_affix_examples() -> None:
    assert f.with_affix(42, "ord_") == "ord_42"
    assert f.with_affix(42, "ord_", width=5) == "ord_00042"
    assert f.with_affix(62, "u", base62=True) == "u10"
    with pytest.raises(ValueError, match="prefix"):
        f.strip_affix("inv_42", "ord_")
    with pytest.raises(ValueError, match="suffix"):
        f.strip_affix("ord_42", "ord_", "-x")


def test_js_safety() -> None:
    assert f.is_js_safe(0) and f.is_js_safe(2**53 - 1)
    assert not f.is_js_safe(2**53) and not f.is_js_safe(-1)
    assert f.require_js_safe(2**53 - 1) == 2**53 - 1
    with pytest.raises(ValueError, match="JavaScript"):
        f.require_js_safe(2**53)


@given(st.data(), keys, st.integers(min_value=8, max_value=64))
def test_obfuscate_round_trip(data: st.DataObject, key: bytes, bits: int) -> None:
    value = data.draw(st.integers(min_value=0, max_value=2**bits - 1))
    hidden = f.obfuscate(value, key, bits)
    assert 0 <= hidden < 2**bits
    assert f.deobfuscate(hidden, key, bits) == value


@given(ids)
def test_default_width_keeps_ids_positive_64_bit(value: int) -> None:
    assert 0 <= f.obfuscate(value, KEY) < 2**63


@given(st.integers(min_value=0, max_value=2**53 - 1))
def test_js_width_keeps_js_safe_ids_js_safe(value: int) -> None:
    assert f.is_js_safe(f.obfuscate(value, KEY, f.JS_BITS))


@pytest.mark.parametrize("bits", [8, 9, 10, 11])
def test_obfuscate_is_a_bijection(bits: int) -> None:
    domain = range(2**bits)
    images = [f.obfuscate(v, KEY, bits) for v in domain]
    assert sorted(images) == list(domain)  # every output once: a permutation of the domain
    assert images != list(domain)  # and not the identity


def test_obfuscate_hides_order_and_depends_on_the_key() -> None:
    consecutive = [f.obfuscate(v, KEY) for v in range(1, 6)]
    assert consecutive != sorted(consecutive)
    assert f.obfuscate(1, KEY) != f.obfuscate(1, KEY[::-1])


def test_obfuscate_errors() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        f.obfuscate(1, b"short")
    with pytest.raises(ValueError, match="bits must be"):
        f.obfuscate(1, KEY, 7)
    with pytest.raises(ValueError, match="does not fit"):
        f.obfuscate(2**63, KEY)
