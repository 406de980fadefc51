"""Store checkpoints: consistent copies, the request handshake with a running node, reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from chronos.errors import ChronosError, ConfigError, StoreError
from chronos.node.checkpointer import CheckpointWorker
from chronos.pipeline.checkpoint_source import _partitions_option, read_slots
from chronos.store import checkpoint, keys
from chronos.store.rocks import RocksStore
from tests.member_stores import FAST, member_database


def _filled(path: Path, slots: range, seek: int) -> RocksStore:
    store = RocksStore(path, FAST)
    batch = store.batch()
    for slot in slots:
        batch.put_message(keys.message_key(slot, f"m{slot}"), b"v%d" % slot)
    batch.set_seek(seek)
    store.write(batch)  # unflushed: only in the memtable and the WAL
    return store


def test_checkpoint_holds_unflushed_writes_and_later_writes_do_not_leak_in(tmp_path: Path) -> None:
    store = _filled(tmp_path / "db", range(100, 200), seek=149)
    result = checkpoint.create(store, tmp_path / "ckpt")
    later = store.batch()
    later.put_message(keys.message_key(500, "late"), b"x")
    store.write(later)
    store.close()
    assert result.seek_ms == 149
    with checkpoint.CheckpointReader(result.path) as reader:
        assert reader.seek_ms() == 149
        assert reader.slot_range() == (100, 199)
        rows = list(reader.messages(150, 200))
    assert [keys.split_message_key(k)[1] for k, _ in rows][:2] == ["m150", "m151"]
    assert len(rows) == 50 and rows[0][1] == b"v150"


def test_checkpoint_refuses_an_existing_destination(tmp_path: Path) -> None:
    store = _filled(tmp_path / "db", range(3), seek=0)
    (tmp_path / "taken").mkdir()
    with pytest.raises(StoreError, match="already exists"):
        checkpoint.create(store, tmp_path / "taken")
    store.close()


def test_take_checkpoint_opens_a_stopped_store_itself(tmp_path: Path) -> None:
    _filled(tmp_path / "db", range(10), seek=4).close()
    result = checkpoint.take_checkpoint(tmp_path / "db", FAST, tmp_path / "c", timeout_s=1)
    assert result.seek_ms == 4
    with pytest.raises(StoreError, match="no chronos store"):
        checkpoint.take_checkpoint(tmp_path / "nothing", FAST, tmp_path / "c2", timeout_s=1)


def test_a_running_node_answers_checkpoint_requests(tmp_path: Path) -> None:
    store = _filled(tmp_path / "db", range(10, 20), seek=12)
    worker = CheckpointWorker(store, tmp_path / "db", poll_s=0.02)
    worker.start()
    try:
        # The store is open (locked), so the command must go through the worker.
        result = checkpoint.take_checkpoint(tmp_path / "db", FAST, tmp_path / "c", timeout_s=10)
        assert result.seek_ms == 12 and result.path == (tmp_path / "c").resolve()
        with pytest.raises(ChronosError, match="already exists"):
            checkpoint.take_checkpoint(tmp_path / "db", FAST, tmp_path / "c", timeout_s=10)
    finally:
        worker.stop()
        worker.join(5)
    assert checkpoint.pending_requests(tmp_path / "db") == []
    store.close()


def test_a_request_nobody_answers_times_out_and_is_withdrawn(tmp_path: Path) -> None:
    store = _filled(tmp_path / "db", range(3), seek=0)  # open, but no worker
    with pytest.raises(ChronosError, match="no node answered"):
        checkpoint.take_checkpoint(tmp_path / "db", FAST, tmp_path / "c", timeout_s=0.3)
    assert checkpoint.pending_requests(tmp_path / "db") == []
    store.close()


def test_reader_rejects_a_folder_that_is_no_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a chronos store checkpoint"):
        checkpoint.CheckpointReader(tmp_path)


def test_a_running_node_writes_checkpoints_only_inside_its_checkpoint_dir(tmp_path: Path) -> None:
    """A request file names any path; the node refuses one outside ``node.checkpoint_dir``
    (here the directory holding the store), one that escapes it through a symbolic link, and
    one inside the store itself."""
    store = _filled(tmp_path / "db", range(3), seek=0)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    (tmp_path / "link").symlink_to(elsewhere, target_is_directory=True)
    (tmp_path / "ok").mkdir()
    worker = CheckpointWorker(store, tmp_path / "db", poll_s=0.02, root=tmp_path / "ok")
    worker.start()
    try:
        for dest, why in (
            (elsewhere / "c", "outside"),
            (tmp_path / "link" / "c", "outside"),
            (tmp_path / "ok" / ".." / "db" / "c", "outside"),
        ):
            with pytest.raises(ChronosError, match=why):
                checkpoint.request_checkpoint(tmp_path / "db", dest, timeout_s=10)
        assert not elsewhere.exists()
        result = checkpoint.request_checkpoint(tmp_path / "db", tmp_path / "ok" / "c", 10)
        assert result.path == (tmp_path / "ok" / "c").resolve()
    finally:
        worker.stop()
        worker.join(5)
    store.close()
    with pytest.raises(ChronosError, match="inside the store"):
        checkpoint.confined(tmp_path / "db" / "c", tmp_path, tmp_path / "db")


def test_the_store_directory_is_owner_only(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir(mode=0o755)
    for name in ("new", "open"):
        store = RocksStore(tmp_path / name, FAST)
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o700
        store.close()


def test_a_cluster_member_s_checkpoint_holds_every_partition_with_its_own_seek(
    tmp_path: Path,
) -> None:
    """Mutants caught: the default schedule read alone (a member's checkpoint looked empty),
    one seek for every partition (partition 3's pending 108 counted as delivered)."""
    database = member_database(tmp_path / "node", {1: 104, 3: 112})
    worker = CheckpointWorker(database, tmp_path / "node", poll_s=0.02)
    worker.start()
    try:
        result = checkpoint.take_checkpoint(tmp_path / "node", FAST, tmp_path / "c", 10)
    finally:
        worker.stop()
        worker.join(5)
    database.close()
    assert result.seek_ms == 104  # the lowest: every partition delivered up to it
    with checkpoint.CheckpointReader(result.path) as reader:
        assert reader.partitions() == [1, 3]
        assert (reader.seek_ms(1), reader.seek_ms(3), reader.seek_ms()) == (104, 112, 104)
        assert reader.slot_range() == (101, 119)
        every = {keys.split_message_key(k)[1] for k, _ in reader.messages(0, 1_000)}
        pending = {keys.split_message_key(k)[1] for k, _ in reader.messages(0, 1_000, True)}
    assert every == {f"p1-{s}" for s in range(101, 120, 4)} | {
        f"p3-{s}" for s in range(103, 120, 4)
    }
    assert pending == {"p1-105", "p1-109", "p1-113", "p1-117", "p3-115", "p3-119"}
    # What the pipeline's source reads (``chronos-checkpoint``): the pending ones.
    columns = [batch.to_pydict() for batch in read_slots(result.path, 0, 1_000, False, True)]
    assert sorted(i for c in columns for i in c["id"]) == sorted(pending)
    # Its ``partitions`` option: the schedules of those only (a member's standby copies out).
    with checkpoint.CheckpointReader(result.path, [3]) as reader:
        assert (reader.partitions(), reader.seek_ms()) == ([3], 112)
        assert reader.slot_range() == (103, 119)
    columns = [b.to_pydict() for b in read_slots(result.path, 0, 1_000, False, True, [3])]
    assert sorted(i for c in columns for i in c["id"]) == ["p3-115", "p3-119"]
    assert _partitions_option(" 3, 1") == [3, 1] and _partitions_option("") is None
    for wrong in ("a", "1,-2"):
        with pytest.raises(ConfigError):
            _partitions_option(wrong)


def test_a_stopped_member_s_database_is_checkpointed_by_the_command_itself(
    tmp_path: Path,
) -> None:
    member_database(tmp_path / "node", {1: 104, 3: 112}).close()
    result = checkpoint.take_checkpoint(tmp_path / "node", FAST, tmp_path / "c", timeout_s=1)
    with checkpoint.CheckpointReader(result.path) as reader:
        assert reader.partitions() == [1, 3] and result.seek_ms == 104


def _member_copy(path: Path, seeks: dict[int, int]) -> Path:
    """A stopped member's checkpoint holding ``seeks``' partitions (``tests/member_stores.py``)."""
    member_database(path / "node", seeks).close()
    return checkpoint.take_checkpoint(path / "node", FAST, path / "c", timeout_s=1).path


def test_a_cluster_s_checkpoints_are_read_each_partition_from_the_copy_that_delivered_furthest(
    tmp_path: Path,
) -> None:
    """What the backlog job reads of several members' checkpoints. Mutants caught: every
    copy read (a partition counted twice, and its standby's delivered messages as pending),
    the first copy kept whatever its seek, the last of equal copies kept."""
    a = _member_copy(tmp_path / "a", {0: 0, 1: 109, 2: 0})  # delivers 1, a standby of 2
    b = _member_copy(tmp_path / "b", {0: 0, 1: 0, 2: 110, 3: 0})  # delivers 2 and 3
    reads = checkpoint.freshest_copies([a, b])
    assert reads == [(a, [0, 1]), (b, [2, 3])]  # 0: neither delivered any, the first given
    pending: list[str] = []
    for path, partitions in reads:
        with checkpoint.CheckpointReader(path, partitions) as reader:
            pending += [keys.split_message_key(k)[1] for k, _ in reader.messages(0, 1_000, True)]
    assert sorted(pending) == sorted(
        [f"p0-{s}" for s in range(100, 120, 4)]
        + ["p1-113", "p1-117", "p2-114", "p2-118"]
        + [f"p3-{s}" for s in range(103, 120, 4)]
    )
    assert checkpoint.freshest_copies([b, a]) == [(b, [0, 2, 3]), (a, [1])]
    assert checkpoint.freshest_copies([a]) == [(a, None)]  # one: all of it


def test_only_a_cluster_s_members_checkpoints_combine(tmp_path: Path) -> None:
    member = _member_copy(tmp_path / "m", {0: 0})
    _filled(tmp_path / "db", range(10), seek=4).close()
    alone = checkpoint.take_checkpoint(tmp_path / "db", FAST, tmp_path / "alone", 1).path
    assert checkpoint.freshest_copies([alone]) == [(alone, None)]
    with pytest.raises(ConfigError, match="node alone's or a replica's"):
        checkpoint.freshest_copies([member, alone])
    with pytest.raises(ConfigError, match="given twice"):
        checkpoint.freshest_copies([member, member.parent / ".." / member.parent.name / "c"])
    with pytest.raises(ConfigError, match="no checkpoint"):
        checkpoint.freshest_copies([])
    for bad in ([tmp_path / "nothing"], [member, tmp_path / "nothing"]):
        with pytest.raises(StoreError, match="nothing is not a chronos store checkpoint"):
            checkpoint.freshest_copies(bad)  # one alone too: not in a Spark task later
    empty = _member_copy(tmp_path / "e", {})
    other = _member_copy(tmp_path / "o", {})
    assert checkpoint.freshest_copies([empty, other]) == [(empty, None)]  # nothing pending


def test_backlog_refuses_bad_checkpoints_before_spark_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage error answered in a second, not after a JVM's start and as a Spark task's
    traceback. Mutant caught: the checkpoints opened inside the job (Spark started first)."""
    from chronos.cli.main import main as chronos_main
    from chronos.pipeline import session

    def no_spark(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("Spark started before the checkpoints were checked")

    monkeypatch.setattr(session, "spark_session", no_spark)
    member = _member_copy(tmp_path / "m", {0: 0})
    _filled(tmp_path / "db", range(10), seek=4).close()
    alone = checkpoint.take_checkpoint(tmp_path / "db", FAST, tmp_path / "alone", 1).path
    backlog = ["pipeline", "backlog", "--out", str(tmp_path / "out"), "--checkpoint"]
    assert chronos_main([*backlog, str(member), "--checkpoint", str(alone)]) == 2
    assert "only a cluster's members' checkpoints combine" in capsys.readouterr().err
    assert chronos_main([*backlog, str(tmp_path / "nothing")]) == 1
    assert "is not a chronos store checkpoint" in capsys.readouterr().err
