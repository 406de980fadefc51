"""Storage key layout: byte order must equal (slot, id) order."""

from __future__ import annotations

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


def test_index_values_are_tagged() -> None:
    key = keys.message_key(1234, "abc")
    pending = keys.index_pending(key)
    assert pending[:1] == keys.INDEX_PENDING and pending[1:] == key
    cancelled = keys.index_cancelled(987)
    assert cancelled[:1] == keys.INDEX_CANCELLED
    assert keys.unpack_ms(cancelled[1:]) == 987


@settings(max_examples=100, deadline=None)
@given(a=SLOTS, b=SLOTS, id_a=IDS, id_b=IDS)
def test_expiry_key_orders_by_time(a: int, b: int, id_a: str, id_b: str) -> None:
    if a != b:
        assert (keys.expiry_key(a, id_a) < keys.expiry_key(b, id_b)) == (a < b)
    assert keys.expiry_key(a, id_a) < keys.slot_bound(a + 1)
