"""Consistent store checkpoints: creating one, asking a running node for one, reading one.

RocksDB can only take a consistent checkpoint from the process that has the database open for
writing: a read-only or secondary opener sees the flushed files but not the memtable, so it
would miss the newest writes. A running node holds the store's lock, hence the handshake:
``chronos checkpoint`` drops a request file into ``<data_dir>/checkpoint-requests/``; the
node's checkpoint worker takes the checkpoint and answers with a result file next to it. With
no node running the command opens the store itself (see ``take_checkpoint``).

A checkpoint is hard links to the store's immutable files plus the write-ahead log needed to
make all column families agree, so it is cheap on the same file system and consistent: the
messages, the index and the seek timestamp are from one instant.

A cluster member of the node shape keeps one database with a schedule per inner partition it
hosts (``database.py``): its checkpoint holds every one of them, each with its own seek
timestamp, and ``CheckpointReader`` reads them all (a partition delivered elsewhere and kept
here as a standby copy too: its seek follows its holder's cuts).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rocksdict import AccessType, Options, Rdict, ReadOptions

from chronos.errors import ChronosError, ConfigError, StoreError
from chronos.names import CF_MESSAGES, CF_META
from chronos.settings import StoreSettings
from chronos.store import keys
from chronos.store.database import family_name, partition_of_family
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

REQUESTS_DIR = "checkpoint-requests"
_REQUEST = ".request"
_RESULT = ".result"


@dataclass(frozen=True)
class CheckpointResult:
    """Where a checkpoint was written and the seek timestamp it holds (the lowest of its
    schedules': every message at or before it was delivered in each)."""

    path: Path
    seek_ms: EpochMs
    took_ms: int


class Checkpointable(Protocol):
    """What can be checkpointed: a node's store, or a cluster member's whole database."""

    def create_checkpoint(self, dest: Path) -> None: ...


def create(store: Checkpointable, dest: Path) -> CheckpointResult:
    """Checkpoint an open store at ``dest`` and read back the seek timestamp it holds."""
    started = time.monotonic()
    store.create_checkpoint(dest)
    took = round((time.monotonic() - started) * 1000)
    with CheckpointReader(dest) as reader:
        return CheckpointResult(dest.resolve(), reader.seek_ms(), took)


def take_checkpoint(
    data_dir: Path, settings: StoreSettings, dest: Path, timeout_s: float
) -> CheckpointResult:
    """A checkpoint of the store at ``data_dir``: taken directly when no node has it open,
    else requested from the node that does."""
    if not (data_dir / "CURRENT").exists():
        raise StoreError(f"no chronos store at {data_dir}")
    try:
        store = RocksStore(data_dir, settings)
    except StoreError as exc:
        if "lock" not in str(exc).lower():
            raise
        return request_checkpoint(data_dir, dest, timeout_s)
    try:
        return create(store, dest)
    finally:
        store.close()


def requests_dir(data_dir: Path) -> Path:
    """Where a running node looks for checkpoint requests."""
    return data_dir / REQUESTS_DIR


def _write_json(path: Path, payload: dict[str, object]) -> None:
    """Write atomically: readers never see half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def request_checkpoint(data_dir: Path, dest: Path, timeout_s: float) -> CheckpointResult:
    """Ask the node that owns ``data_dir`` for a checkpoint at ``dest``; wait for its answer.

    Raises ChronosError when the node refuses (e.g. ``dest`` exists) or does not answer in time.
    """
    folder = requests_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    request, result = folder / (name + _REQUEST), folder / (name + _RESULT)
    _write_json(request, {"dest": str(dest.resolve())})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result.exists():
            answer = json.loads(result.read_text())
            result.unlink()
            if not answer.get("ok"):
                raise ChronosError(f"the node could not create the checkpoint: {answer['error']}")
            return CheckpointResult(Path(answer["path"]), answer["seek_ms"], answer["took_ms"])
        time.sleep(0.05)
    request.unlink(missing_ok=True)
    raise ChronosError(
        f"no node answered the checkpoint request within {timeout_s} s "
        f"(is the node owning {data_dir} running and up to date?)"
    )


def pending_requests(data_dir: Path) -> list[Path]:
    """Request files waiting for the node, oldest first."""
    folder = requests_dir(data_dir)
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*" + _REQUEST), key=lambda p: p.stat().st_mtime)


def answer_request(request: Path, result: CheckpointResult | None, error: str | None) -> None:
    """Write the result file the waiting command reads, then drop the request."""
    if result is not None:
        payload: dict[str, object] = {
            "ok": True,
            "path": str(result.path),
            "seek_ms": result.seek_ms,
            "took_ms": result.took_ms,
        }
    else:
        payload = {"ok": False, "error": error}
    _write_json(request.with_suffix(_RESULT), payload)
    request.unlink(missing_ok=True)


def confined(dest: Path, root: Path, data_dir: Path) -> Path:
    """``dest`` resolved (symbolic links followed), when it lies inside ``root`` and outside
    the store; ChronosError otherwise: a request file names any path, and the node would write
    a whole store there with its own rights."""
    resolved = dest.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ChronosError(
            f"checkpoint destination {resolved} is outside {root.resolve()} (node.checkpoint_dir)"
        )
    if resolved.is_relative_to(data_dir.resolve()):
        raise ChronosError(f"checkpoint destination {resolved} is inside the store {data_dir}")
    return resolved


def requested_dest(request: Path) -> Path:
    """The destination a request asks for."""
    return Path(json.loads(request.read_text())["dest"])


class CheckpointReader:
    """Read-only view of a checkpoint: its schedules' seek timestamps and their messages in
    slot order.

    Several readers (Spark tasks) may open one checkpoint at once.

    Parameters:
        path: a directory created by ``chronos checkpoint``.
        partitions: read only these inner partitions' schedules (a cluster member's
            checkpoint holds its standby copies too, whose seek trails their holder's);
            None: every schedule.
    """

    def __init__(self, path: Path, partitions: Collection[int] | None = None) -> None:
        if not (path / "CURRENT").exists():
            raise StoreError(f"{path} is not a chronos store checkpoint (no RocksDB CURRENT file)")
        options = Options(raw_mode=True)
        try:
            families = Rdict.list_cf(str(path), options)
            self._db = Rdict(
                str(path),
                options,
                column_families={name: Options(raw_mode=True) for name in families},
                access_type=AccessType.read_only(),
            )
        except Exception as exc:  # rocksdict raises plain Exceptions for open failures
            raise StoreError(f"cannot open checkpoint {path}: {exc}") from exc
        #: (messages, meta) of each schedule: the default one (a node alone's, a replica's)
        #: and each inner partition's (a cluster member's).
        self._schedules: dict[int | None, tuple[Rdict, Rdict]] = {}
        found = {partition_of_family(name) for name in families}
        schedules: list[int | None] = [None] if partitions is None else []
        schedules += sorted(p for p in found if p is not None and _wanted(p, partitions))
        try:
            for partition in schedules:
                messages = family_name(CF_MESSAGES, partition)
                meta = family_name(CF_META, partition)
                if messages in families and meta in families:
                    self._schedules[partition] = (
                        self._db.get_column_family(messages),
                        self._db.get_column_family(meta),
                    )
            self._seeks = {p: _seek_of(meta) for p, (_m, meta) in self._schedules.items()}
        except Exception as exc:  # rocksdict raises plain Exceptions
            self.close()
            raise StoreError(f"cannot read checkpoint {path}: {exc}") from exc

    def partitions(self) -> list[int]:
        """The inner partitions with a schedule in the checkpoint (none: a node alone's or a
        replica's, whose one schedule is the default one)."""
        return [p for p in self._schedules if p is not None and self._holds(p)]

    def _holds(self, partition: int | None) -> bool:
        """Whether ``partition``'s schedule holds a message or a seek (a member's families
        exist, empty, for every inner partition)."""
        messages, _meta = self._schedules[partition]
        return self._seeks[partition] is not None or _first_key(messages) is not None

    def holds_default_schedule(self) -> bool:
        """Whether the default schedule holds a message or a seek: a node alone's or a
        replica's checkpoint, not a cluster member's."""
        return None in self._schedules and self._holds(None)

    def _held(self) -> list[int | None]:
        return [p for p in self._schedules if self._holds(p)]

    def seek_ms(self, partition: int | None = None) -> EpochMs:
        """Every message with slot <= seek was delivered when the checkpoint was taken: in
        ``partition``'s schedule, or (None) in every schedule the checkpoint holds."""
        if partition is not None:
            return self._seeks.get(partition) or 0
        seeks = [self._seeks[p] or 0 for p in self._held()]
        return min(seeks, default=0)

    def slot_range(self) -> tuple[EpochMs, EpochMs] | None:
        """(first, last) slot of the stored messages, None when there are none."""
        found: list[tuple[EpochMs, EpochMs]] = []
        for messages, _meta in self._schedules.values():
            it = messages.iter(ReadOptions())
            it.seek_to_first()
            if not it.valid():
                continue
            first = keys.slot_of(it.key())
            it.seek_to_last()
            found.append((first, keys.slot_of(it.key())))
        if not found:
            return None
        return min(f for f, _l in found), max(last for _f, last in found)

    def messages(
        self, start_ms: EpochMs, stop_ms: EpochMs, pending: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, encoded message) with ``start_ms <= slot < stop_ms``, in key order within
        each schedule, one schedule after another; ``pending``: only those after their
        schedule's seek (not delivered when the checkpoint was taken)."""
        for partition, (table, _meta) in self._schedules.items():
            start = max(start_ms, (self._seeks[partition] or 0) + 1) if pending else start_ms
            if start >= stop_ms:
                continue
            read = ReadOptions()
            read.set_iterate_upper_bound(keys.slot_bound(stop_ms))
            it = table.iter(read)
            it.seek(keys.slot_bound(start))
            while it.valid():
                yield it.key(), it.value()
                it.next()

    def close(self) -> None:
        """Release the files (RocksDB keeps them open while any handle lives)."""
        for messages, meta in self._schedules.values():
            messages.close()
            meta.close()
        self._schedules.clear()
        self._db.close()
        del self._db

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What to read of one checkpoint: its path and the inner partitions to read (None: every
#: schedule it holds).
CheckpointRead = tuple[Path, list[int] | None]


def freshest_copies(paths: Sequence[Path]) -> list[CheckpointRead]:
    """What to read of ``paths`` for the pending messages they hold together; each is opened
    (a bad one fails here, with its name, not in a Spark task).

    One checkpoint: all of it. Several (a cluster's members', taken about together): each
    inner partition from the one whose copy of it delivered furthest, the member delivering
    it; a standby copy's seek trails its holder's, so a message the holder delivered can
    still be pending there, and reading every copy would count a partition once per copy.
    Of copies with the same seek, the first given. A node alone's or a replica's checkpoint
    does not combine (its one schedule spans every partition). A member left out is not
    noticed: its partitions are read from a standby's copy, or not at all.
    """
    if not paths:
        raise ConfigError("no checkpoint given")
    seen: dict[Path, Path] = {}
    for path in paths:
        same = seen.setdefault(path.resolve(), path)
        if same is not path:
            raise ConfigError(f"checkpoint {path} is given twice (as {same} too)")
    best: dict[int, tuple[EpochMs, Path]] = {}
    for path in paths:
        with CheckpointReader(path) as reader:
            if len(paths) > 1 and reader.holds_default_schedule():
                raise ConfigError(
                    f"{path} is a node alone's or a replica's checkpoint: only a cluster's "
                    "members' checkpoints combine"
                )
            for partition in reader.partitions():
                seek = reader.seek_ms(partition)
                if partition not in best or seek > best[partition][0]:
                    best[partition] = (seek, path)
    if len(paths) == 1 or not best:
        return [(paths[0], None)]  # all of one; or none holds a message or a seek
    chosen: dict[Path, list[int]] = {}
    for partition, (_seek, path) in sorted(best.items()):
        chosen.setdefault(path, []).append(partition)
    return [(path, chosen[path]) for path in paths if path in chosen]


def _wanted(partition: int, partitions: Collection[int] | None) -> bool:
    return partitions is None or partition in partitions


def _seek_of(meta: Rdict) -> EpochMs | None:
    raw = meta.get(keys.META_SEEK)
    return None if raw is None else keys.unpack_ms(raw)


def _first_key(table: Rdict) -> bytes | None:
    it = table.iter(ReadOptions())
    it.seek_to_first()
    return it.key() if it.valid() else None
