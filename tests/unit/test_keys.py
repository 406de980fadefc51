"""Storage key layout: byte order must equal (slot, id) order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from chronos.store import keys

SLOTS = st.integers(min_value=0, max_value=2**63)
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # hypothesis wants category literals
IDS = st.text(alphabet=st.characters(blacklist_categories=SURROGATES), max_size=40)


@settings(max_examples=300, deadline=None)
@given(a=SLOTS, b=SLOTS, id_a=IDS, id_b=IDS)
def test_message_key_byte_order_follows_slot_order(a: int, b: int, id_a: str, id_b: str) -> None:
    ka, kb = keys.message_key(a, id_a), keys.message_key(b, id_b)
    if a < b:
        assert ka < kb
    elif a > b:
        assert ka > kb
    else:
        # same slot: ordered by the id's UTF-8 bytes
        assert (ka < kb) == (id_a.encode() < id_b.encode())


@settings(max_examples=200, deadline=None)
@given(slot=SLOTS, message_id=IDS)
def test_message_key_round_trip(slot: int, message_id: str) -> None:
    key = keys.message_key(slot, message_id)
    assert keys.split_message_key(key) == (slot, message_id)
    assert keys.slot_of(key) == slot
    assert len(key) == keys.MS_WIDTH + len(message_id.encode())


@settings(max_examples=300, deadline=None)
@given(slot=SLOTS, other=SLOTS, message_id=IDS)
def test_slot_bound_separates_slots(slot: int, other: int, message_id: str) -> None:
    bound = keys.slot_bound(slot)
    key = keys.message_key(other, message_id)
    if other < slot:
        assert key < bound
    else:
        # every key of this slot or a later one sorts at or after the bound
        assert bound <= key
        if other == slot and message_id:
            assert bound < key


def test_slot_bound_extremes() -> None:
    assert keys.message_key(0, "\U0010ffff" * 10) < keys.slot_bound(1)
    assert keys.message_key(keys.MAX_MS - 1, "zzz") < keys.slot_bound(keys.MAX_MS)
    assert keys.slot_bound(keys.MAX_MS) <= keys.message_key(keys.MAX_MS, "")


@settings(max_examples=100, deadline=None)
@given(ms=st.integers(min_value=0, max_value=keys.MAX_MS))
def test_pack_unpack_ms(ms: int) -> None:
    raw = keys.pack_ms(ms)
    assert len(raw) == keys.MS_WIDTH
    assert keys.unpack_ms(raw + b"trailing") == ms


def test_index_values_read_back_as_typed_entries() -> None:
    key = keys.message_key(1234, "abc")
    pending = keys.read_index(keys.index_pending(key))
    assert pending == keys.Pending(key) and isinstance(pending, keys.Pending)
    assert pending.slot_ms == 1234
    assert keys.pending_key(keys.index_pending(key)) == key
    cancelled = keys.index_cancelled(987, keys.CANCEL_RACED)
    assert keys.read_index(cancelled) == keys.Cancelled(987, keys.CANCEL_RACED)
    assert keys.is_cancelled(cancelled) and not keys.is_cancelled(keys.index_pending(key))
    assert keys.pending_key(cancelled) is None
    assert keys.read_index(None) is None and not keys.is_cancelled(None)


def test_a_tombstone_of_a_release_before_0_24_reads_without_what_it_found() -> None:
    # 0.23 wrote b"C" + ms with no trailing byte.
    old = keys.index_cancelled(987)[:-1]
    assert keys.read_index(old) == keys.Cancelled(987, None)


@settings(max_examples=200, deadline=None)
@given(slot=SLOTS, message_id=IDS, at=SLOTS)
def test_every_index_value_reads_back_as_written(slot: int, message_id: str, at: int) -> None:
    key = keys.message_key(slot, message_id)
    entry = keys.read_index(keys.index_pending(key))
    assert isinstance(entry, keys.Pending) and (entry.key, entry.slot_ms) == (key, slot)
    for how in (keys.CANCEL_REMOVED, keys.CANCEL_RACED, keys.CANCEL_UNKNOWN, keys.CANCEL_FOLLOWER):
        assert keys.read_index(keys.index_cancelled(at, how)) == keys.Cancelled(at, how)


def test_no_module_outside_the_store_reads_the_bytes_of_an_index_value() -> None:
    """Issue 61: the store owns its byte formats; elsewhere index values are read as
    ``keys.Pending`` / ``keys.Cancelled`` (``keys.read_index``)."""
    root = Path(__file__).resolve().parents[2] / "chronos"
    leaks = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.parent.name != "store"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "_INDEX_" in line or "split_cancelled" in line or re.search(r"\[:1\] [!=]= keys", line)
    ]
    assert leaks == []


@settings(max_examples=100, deadline=None)
@given(a=SLOTS, b=SLOTS, id_a=IDS, id_b=IDS)
def test_expiry_key_orders_by_time(a: int, b: int, id_a: str, id_b: str) -> None:
    if a != b:
        assert (keys.expiry_key(a, id_a) < keys.expiry_key(b, id_b)) == (a < b)
    assert keys.expiry_key(a, id_a) < keys.slot_bound(a + 1)
