"""The per-node failure detector (``group/peer_watch.py``) on a fake clock: a peer is
suspected only after a silence (or a stall) watched without a break, the watcher's own
heartbeats being the proof of watching."""

from __future__ import annotations

import pytest

from chronos.errors import DecodeError
from chronos.group.peer_watch import (
    Heartbeat,
    PeerWatch,
    decode_heartbeat,
    encode_heartbeat,
    gap_for,
)

SUSPECT_S = 1.5
BEAT_S = 0.25


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def beat(node: str, commits: int = 0, due: bool = False) -> Heartbeat:
    return Heartbeat(node, commits, due, 0)


def run(
    watch: PeerWatch,
    clock: Clock,
    seconds: float,
    beating: dict[str, tuple[int, bool]],
    every_s: float = BEAT_S,
) -> None:
    """Every ``every_s``, each node of ``beating`` (the watcher included when named) beats."""
    for _ in range(round(seconds / every_s)):
        clock.t += every_s
        for node, (commits, due) in beating.items():
            watch.heard(beat(node, commits, due))


def test_a_heartbeat_round_trips() -> None:
    sent = Heartbeat("n1", 42, True, 1_700_000_000_000)
    assert decode_heartbeat(*encode_heartbeat(sent)) == sent
    for key, value in [(None, b"{}"), (b"n1", None), (b"n1", b"{"), (b"n1", b'{"v": 2}')]:
        with pytest.raises(DecodeError):
            decode_heartbeat(key, value)


def test_a_peer_that_stops_beating_is_suspected_after_the_silence_and_not_before() -> None:
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, clock)
    run(watch, clock, 2.0, {"a": (0, False), "b": (0, False), "c": (0, False)})
    assert watch.suspects() == [] and watch.peers == ["b", "c"]
    run(watch, clock, 1.25, {"a": (0, False), "b": (0, False)})  # c stopped
    assert watch.suspects() == [], "1.25 s of silence"
    run(watch, clock, 0.5, {"a": (0, False), "b": (0, False)})
    assert watch.suspects() == ["c"]
    assert watch.silent_s("c") >= SUSPECT_S and watch.silent_s("b") < BEAT_S + 0.01
    watch.forget("c")
    assert watch.suspects() == [] and watch.peers == ["b"]


def test_a_frozen_watcher_suspects_nobody_when_it_thaws() -> None:
    """Mutant caught: silence counted on the clock instead of along the watcher's own chain
    of heartbeats (a watcher stopped for 5 s suspected both live peers at once)."""
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, clock)
    run(watch, clock, 2.0, {"a": (0, False), "b": (0, False), "c": (0, False)})
    clock.t += 5.0  # frozen: nothing read, nothing sent
    assert watch.suspects() == [], "not watching now"
    watch.heard(beat("b"))  # the backlog of the others arrives first
    watch.heard(beat("a"))
    assert watch.suspects() == []
    run(watch, clock, 1.0, {"a": (0, False), "b": (0, False)})
    assert watch.suspects() == [], "c's silence counts from the new chain: 1 s"
    run(watch, clock, 0.75, {"a": (0, False), "b": (0, False)})
    assert watch.suspects() == ["c"]


def test_a_watcher_that_reads_no_beat_of_its_own_suspects_nobody() -> None:
    """Kafka stalls for the watcher (its own beats do not come back): no chain, no suspicion."""
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, clock)
    run(watch, clock, 1.0, {"a": (0, False), "b": (0, False)})
    run(watch, clock, 3.0, {})
    assert watch.suspects() == [] and watch.silent_s("b") == 0.0


def test_a_peer_that_beats_but_does_not_commit_what_is_due_is_suspected() -> None:
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, clock)
    run(watch, clock, 1.0, {"a": (0, False), "b": (5, True), "c": (9, False)})
    # b commits on; c idle (nothing due, commits standing still): both fine.
    for n in range(8):
        clock.t += BEAT_S
        for node, commits, due in (("a", 0, False), ("b", 6 + n, True), ("c", 9, False)):
            watch.heard(beat(node, commits, due))
    assert watch.suspects() == []
    run(watch, clock, 1.25, {"a": (0, False), "b": (13, True), "c": (9, False)})
    assert watch.suspects() == [], "b stalled 1.25 s"
    run(watch, clock, 0.5, {"a": (0, False), "b": (13, True), "c": (9, False)})
    assert watch.suspects() == ["b"] and watch.stalled_s("c") == 0.0


def test_a_peer_silent_only_while_the_watcher_was_cut_off_still_counts_as_heard() -> None:
    """A broker's restart silences everyone: right after it, a peer whose beats had not come
    back yet was "not heard" on the wall clock, and a round claimed its partitions when the
    group's member list did not name it yet either. Its silence counts from the watcher's
    new chain. Mutant caught: the wall clock since its last beat."""
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, now=clock)
    run(watch, clock, 2.0, {"a": (0, False), "b": (0, False)})
    assert watch.heard_within(SUSPECT_S) == {"b"}
    clock.t += 12.0  # the broker is away: nobody's beats arrive, the watcher's neither
    run(watch, clock, 1.0, {"a": (0, False)})  # the watcher's own come back first
    assert watch.heard_within(SUSPECT_S) == {"b"}, "silent only while a was cut off"
    run(watch, clock, 1.0, {"a": (0, False)})  # b stays silent, watched 2 s now
    assert watch.heard_within(SUSPECT_S) == frozenset()
    assert watch.suspects() == ["b"]


def test_a_peer_silent_while_watched_is_no_longer_heard() -> None:
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, now=clock)
    run(watch, clock, 2.0, {"a": (0, False), "b": (0, False)})
    run(watch, clock, 1.0, {"a": (0, False)})
    assert watch.heard_within(SUSPECT_S) == {"b"}
    run(watch, clock, 0.75, {"a": (0, False)})
    assert watch.heard_within(SUSPECT_S) == frozenset()


def test_a_peer_silent_for_long_counts_as_gone_though_the_watcher_cannot_watch() -> None:
    """A node whose own heartbeats do not come back watches nothing; a peer silent by the
    clock for 30 s is not heard all the same (else its partitions would wait for ever).
    Mutant caught: no bound on the clock."""
    clock = Clock()
    watch = PeerWatch("a", SUSPECT_S, now=clock)
    run(watch, clock, 2.0, {"a": (0, False), "b": (0, False)})
    run(watch, clock, 29.0, {})
    assert watch.heard_within(SUSPECT_S) == {"b"}, "not watched: silent only by the clock"
    run(watch, clock, 1.5, {})
    assert watch.heard_within(SUSPECT_S) == frozenset()


def test_a_longer_beat_interval_still_lets_a_silent_peer_be_suspected() -> None:
    """``group.progress_interval_ms`` may be 600 ms or more (with ``suspect_after_ms`` at
    least 3 times it): the watcher's own beats then come further apart than the default
    gap, and its chain must still form. Mutant caught: the fixed 0.6 s gap (the chain never
    formed and the silent peer was never suspected)."""
    every_s, suspect_s = 0.7, 2.1
    assert gap_for(BEAT_S) == pytest.approx(0.6)
    clock = Clock()
    watch = PeerWatch("a", suspect_s, clock, max_gap_s=gap_for(every_s))
    run(watch, clock, 2.8, {"a": (0, False), "b": (0, False), "c": (0, False)}, every_s)
    run(watch, clock, 1.4, {"a": (0, False), "b": (0, False)}, every_s)  # c stopped
    assert watch.suspects() == [], "1.4 s of silence"
    run(watch, clock, 1.4, {"a": (0, False), "b": (0, False)}, every_s)
    assert watch.suspects() == ["c"]
    # A stall longer than the gap breaks the chain: silence is counted again from its new
    # start. Mutant caught: no bound (d was suspected at once).
    run(watch, clock, 2.8, {"a": (0, False), "b": (0, False), "d": (0, False)}, every_s)
    clock.t += 1.8  # 1.8 s without the watcher's own beats (the gap: 1.68 s)
    run(watch, clock, 1.4, {"a": (0, False), "b": (0, False)}, every_s)  # d stopped
    assert "d" not in watch.suspects(), "d silent 3.2 s by the clock, 1.4 s watched"
