"""Progress records, a replica group's or a node alone's: one cut, one state per live repeat,
and the claims of a partition's owners (``group/claims.py``).

A cut (``Cut``) is a frontier and the inner offsets of the adds written before it moved
(``frontier.py``): with the adds' due times it says exactly which were delivered, so a store
rebuilt from the inner topic knows what not to deliver again (``chronos/group/__init__.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from chronos.errors import DecodeError
from chronos.model import DelayMessage
from chronos.schedule.floor import Floor
from chronos.store import codec, keys
from chronos.types import EpochMs

#: Key of the committed cut; compaction keeps the latest.
CUT_KEY = b"cut"
#: Prefix of a repeat's state; compaction keeps its latest, a tombstone once it finished.
REPEAT_PREFIX = b"repeat:"
#: Prefix of a partition's cut in a node's progress log (``group/node_log.py``):
#: ``cut:<partition>``, so that compaction keeps each partition's last cut there.
NODE_CUT_PREFIX = b"cut:"
#: Prefix of a claim (``group/claims.py``): ``claim:<term>:<node>:<nonce>``, a key of its own,
#: never tombstoned, so that compaction (the last record of a key) keeps every claim.
CLAIM_PREFIX = b"claim:"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class RepeatState:
    """Where a master put a repeat's next occurrence, as its progress record says.

    Parameters:
        message_id: the repeat's id.
        message: its next occurrence, None once it finished.
        slot_ms: the slot that occurrence was given (``max(due, seek + 1)`` of its record).
    """

    message_id: str
    message: DelayMessage | None
    slot_ms: EpochMs


@dataclass(frozen=True, slots=True)
class Cut:
    """What a master's committed transactions delivered (see ``chronos/group/__init__.py``).

    Parameters:
        term: the master's term, one more than the term it took over from.
        seek_ms: its frontier: adds below ``offsets`` with due <= this are delivered.
        offsets: next inner offset per partition of the adds it had written before that move.
        node: the master's node id.
        committed_at_ms: the master's clock when it wrote the record.
        floor: the rebuild floor as of this record, None before any refresh pass completed
            (``chronos/schedule/floor.py``).
        released_to: the replica this master handed the delivery to with this, its last
            record (a graceful leave or a move, ``chronos/cluster/``): that one takes over at
            once instead of waiting for the progress topic to stand still. None otherwise.
        paced: the rate plan of each target topic with a backlog: the theoretical arrival
            time (epoch ms) of its next message (``delivery/rate_plan.py``); a successor
            starts from it.
        ahead_ms: how far the master's rate look-ahead had read: a message of a limited topic
            at or before it was planned (``delivery/rate_plan.py``); None without one.
        seq: a cluster node's count of this partition's cuts before this one in its term:
            its cuts go to two logs (the partition's own, and the node's, ``group/node_log.py``),
            and a follower orders them by (term, seq). None: a replica group's or a node
            alone's cut, all in one log.
        logged: in a node's log, the ``seq`` of the term's last cut in the partition's own
            log (the one that carried repeat states): a follower applies this cut only after
            that one. None in the partition's own log.
    """

    term: int
    seek_ms: EpochMs
    offsets: dict[int, int]
    node: str
    committed_at_ms: EpochMs
    floor: Floor | None = None
    released_to: str | None = None
    paced: Mapping[str, float] = field(default_factory=dict)
    ahead_ms: EpochMs | None = None
    seq: int | None = None
    logged: int | None = None


def cut_order(cut: Cut) -> tuple[int, int]:
    """Where a cut lies in its partition's history: its term, then its place in the term
    (a cut without ``seq``, of one log only, first). A cut is cumulative: a later one says
    all an earlier one does."""
    return cut.term, -1 if cut.seq is None else cut.seq


def later(first: Cut | None, second: Cut | None) -> Cut | None:
    """The later of two cuts of a partition (``cut_order``; the first on a tie)."""
    if first is None or (second is not None and cut_order(second) > cut_order(first)):
        return second
    return first


@dataclass(frozen=True, slots=True)
class Claim:
    """A node's bid to deliver a partition from ``term`` on (``group/claims.py`` decides it).

    Parameters:
        term: one more than the highest term the claimant read.
        node: the claimant's node id.
        after: the offset of the last record the claimant read before it (-1: none).
        nonce: makes the key unique: two claims of one node and term are two records.
        fenced: the transactional ids the claimant fenced first (for the record's reader).
        cut: the cut the claimant delivers from if it wins: the later of the last cut in
            this log and the holder's last in its node log (``group/node_log.py``), read
            after the fence. In the claim because that node-log cut may be compacted away
            once its node no longer holds the partition: a successor of a winner that died
            before writing a cut of its own finds it here.
    """

    term: int
    node: str
    after: int
    nonce: str
    fenced: tuple[str, ...] = ()
    cut: Cut | None = None


def encode_claim(claim: Claim) -> tuple[bytes, bytes]:
    """(key, value) of a claim record."""
    key = f"{CLAIM_PREFIX.decode()}{claim.term}:{claim.node}:{claim.nonce}".encode()
    body = {
        "v": _VERSION,
        "term": claim.term,
        "node": claim.node,
        "after": claim.after,
        "nonce": claim.nonce,
        "fenced": list(claim.fenced),
    }
    if claim.cut is not None:
        body["cut"] = _cut_dict(claim.cut)
    return key, json.dumps(body, separators=(",", ":")).encode()


def _decode_claim(value: bytes | None) -> Claim:
    if value is None:
        raise DecodeError("a claim is never tombstoned")
    try:
        body = json.loads(value)
        if body.get("v") != _VERSION:
            raise DecodeError(f"claim record version {body.get('v')!r} is not {_VERSION}")
        return Claim(
            term=int(body["term"]),
            node=str(body["node"]),
            after=int(body["after"]),
            nonce=str(body["nonce"]),
            fenced=tuple(str(f) for f in body.get("fenced", ())),
            cut=None if body.get("cut") is None else _cut_of(body["cut"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DecodeError(f"undecodable claim record: {exc}") from exc


def encode_cut(cut: Cut) -> tuple[bytes, bytes]:
    """(key, value) of a cut record in a partition's own log."""
    return CUT_KEY, _cut_body(cut)


def encode_node_cut(partition: int, cut: Cut) -> tuple[bytes, bytes]:
    """(key, value) of ``partition``'s cut in a node's progress log."""
    return NODE_CUT_PREFIX + str(partition).encode(), _cut_body(cut)


def node_cut_partition(key: bytes | None) -> int | None:
    """The partition a node log's record is the cut of (None: not a cut), read from its key
    alone: a reader skips other partitions' cuts without decoding them."""
    if key is None or not key.startswith(NODE_CUT_PREFIX):
        return None
    try:
        return int(key[len(NODE_CUT_PREFIX) :])
    except ValueError:
        return None


def decode_node_cut(key: bytes | None, value: bytes | None) -> tuple[int, Cut]:
    """(partition, cut) of a node log's record; DecodeError for anything else."""
    partition = node_cut_partition(key)
    if partition is None or value is None:
        raise DecodeError(f"not a node log's cut: {key!r}")
    return partition, decode_cut_value(value)


def _cut_body(cut: Cut) -> bytes:
    return json.dumps(_cut_dict(cut), separators=(",", ":")).encode()


def _cut_dict(cut: Cut) -> dict[str, object]:
    body: dict[str, object] = {
        "v": _VERSION,
        "term": cut.term,
        "seek_ms": cut.seek_ms,
        "offsets": {str(p): o for p, o in sorted(cut.offsets.items())},
        "node": cut.node,
        "at_ms": cut.committed_at_ms,
    }
    if cut.floor is not None:
        # Readers of an earlier release ignore a key they do not know.
        body["floor"] = {str(p): o for p, o in sorted(cut.floor.offsets.items())}
        body["floor_at_ms"] = cut.floor.at_ms
    if cut.released_to is not None:
        # An earlier release's replica ignores it and takes over once the topic is quiet.
        body["released_to"] = cut.released_to
    if cut.paced:
        # An earlier release's master starts without it: a backlog's rate restarts full.
        body["paced"] = {t: round(tat, 3) for t, tat in sorted(cut.paced.items())}
    if cut.ahead_ms is not None:
        # An earlier release's master plans those messages again as they fall due.
        body["ahead_ms"] = cut.ahead_ms
    if cut.seq is not None:
        body["seq"] = cut.seq
    if cut.logged is not None:
        body["logged"] = cut.logged
    return body


def _floor(body: dict[str, object]) -> Floor | None:
    offsets = body.get("floor")
    if not isinstance(offsets, dict):
        return None
    return Floor({int(p): int(o) for p, o in offsets.items()}, int(str(body["floor_at_ms"])))


def decode_cut_value(value: bytes) -> Cut:
    """A cut from its record's value alone, wherever it was kept (a node log's reader keeps
    the values, keyed by partition already); DecodeError when it is none."""
    try:
        body = json.loads(value)
    except ValueError as exc:
        raise DecodeError(f"undecodable cut record: {exc}") from exc
    return _cut_of(body)


def _cut_of(body: object) -> Cut:
    try:
        if not isinstance(body, dict):
            raise TypeError(f"a cut is an object, not {type(body).__name__}")
        if body.get("v") != _VERSION:
            raise DecodeError(f"progress record version {body.get('v')!r} is not {_VERSION}")
        return Cut(
            term=int(body["term"]),
            seek_ms=int(body["seek_ms"]),
            offsets={int(p): int(o) for p, o in body["offsets"].items()},
            node=str(body["node"]),
            committed_at_ms=int(body["at_ms"]),
            floor=_floor(body),
            released_to=None if body.get("released_to") is None else str(body["released_to"]),
            paced={str(t): float(tat) for t, tat in body.get("paced", {}).items()},
            ahead_ms=None if body.get("ahead_ms") is None else int(body["ahead_ms"]),
            seq=None if body.get("seq") is None else int(body["seq"]),
            logged=None if body.get("logged") is None else int(body["logged"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DecodeError(f"undecodable cut record: {exc}") from exc


def encode_repeat(state: RepeatState) -> tuple[bytes, bytes | None]:
    """(key, value) of a repeat's state; a None value (tombstone) once it finished."""
    key = REPEAT_PREFIX + state.message_id.encode()
    if state.message is None:
        return key, None
    return key, keys.pack_ms(state.slot_ms) + codec.encode(state.message)


def decode(key: bytes | None, value: bytes | None) -> Cut | RepeatState | Claim:
    """A progress record; DecodeError for anything else (the topic is chronos' own)."""
    if key is not None and key.startswith(CLAIM_PREFIX):
        return _decode_claim(value)
    if key == CUT_KEY and value is not None:
        return decode_cut_value(value)
    if key is not None and key.startswith(REPEAT_PREFIX):
        message_id = key[len(REPEAT_PREFIX) :].decode()
        if value is None:
            return RepeatState(message_id, None, 0)
        if len(value) <= keys.MS_WIDTH:
            raise DecodeError(f"repeat state of {message_id!r} is too short")
        return RepeatState(message_id, codec.decode(value[keys.MS_WIDTH :]), keys.unpack_ms(value))
    raise DecodeError(f"unknown progress record key {key!r}")
