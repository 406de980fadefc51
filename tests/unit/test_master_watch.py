"""The failure detector on the master's commits, and what a replica does with it."""

from __future__ import annotations

from chronos.group.master_watch import MasterWatch


class Answers:
    """The progress topic's end as Kafka answers it, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.end = 10
        self.down = False

    def read_end(self) -> int:
        if self.down:
            raise RuntimeError("no answer")
        return self.end

    def clock(self) -> float:
        return self.now


def _watch(answers: Answers, suspect_after_s: float = 1.5) -> MasterWatch:
    return MasterWatch(answers.read_end, suspect_after_s, answers.clock)


def _tick(watch: MasterWatch, answers: Answers, seconds: float, moving: bool) -> None:
    """Answers every 0.1 s for ``seconds``; the master commits on each when ``moving``."""
    for _ in range(round(seconds / 0.1)):
        answers.now += 0.1
        if moving:
            answers.end += 2
        watch.observe()


def _away(watch: MasterWatch, answers: Answers, seconds: float) -> None:
    """Kafka does not answer for ``seconds``, then answers again."""
    answers.down = True
    _tick(watch, answers, seconds, moving=False)
    answers.down = False


def test_a_master_that_stops_committing_is_suspected_after_the_silence() -> None:
    answers = Answers()
    watch = _watch(answers)
    _tick(watch, answers, 1.0, moving=True)
    assert not watch.suspects() and not watch.quiet() and watch.moved_at is not None
    _tick(watch, answers, 1.4, moving=False)
    assert not watch.suspects()
    _tick(watch, answers, 0.2, moving=False)
    assert watch.suspects() and watch.quiet()


def test_a_fresh_watch_suspects_a_silence_it_never_saw_broken() -> None:
    """A node started while nobody commits (its master killed, the one taking over killed
    too) need not wait for the election's session timeout. Mutant caught: a fresh watch
    asking to have seen the end move first."""
    answers = Answers()
    watch = _watch(answers)
    _tick(watch, answers, 1.3, moving=False)
    assert not watch.suspects()
    _tick(watch, answers, 0.4, moving=False)
    assert watch.suspects()


def test_after_a_reset_no_suspicion_without_having_seen_a_master_commit() -> None:
    """A node demoted while the new master is still in its takeover (no commit yet) must not
    fence it again. Mutant caught: reset leaving the watch fresh."""
    answers = Answers()
    watch = _watch(answers)
    watch.reset()
    _tick(watch, answers, 5.0, moving=False)
    assert not watch.suspects()
    _tick(watch, answers, 0.3, moving=True)
    _tick(watch, answers, 1.6, moving=False)
    assert watch.suspects()


def test_kafka_is_asked_about_ten_times_a_second() -> None:
    answers = Answers()
    asked = 0

    def read_end() -> int:
        nonlocal asked
        asked += 1
        return answers.end

    watch = MasterWatch(read_end, 1.5, answers.clock)
    for _ in range(100):  # a loop ticking every 10 ms for a second
        answers.now += 0.01
        watch.observe()
    assert 9 <= asked <= 12


def test_a_break_in_the_answers_starts_the_chain_again() -> None:
    """A broker that did not answer, or a starved backup, is not a silent master."""
    answers = Answers()
    watch = _watch(answers)
    _tick(watch, answers, 0.5, moving=True)
    _tick(watch, answers, 1.0, moving=False)
    _away(watch, answers, 1.0)
    _tick(watch, answers, 1.0, moving=False)
    assert not watch.suspects()  # 1.0 s watched since the break
    answers.now += 2.0  # the backup was starved: a gap between two answers
    watch.observe()
    assert not watch.suspects()
    _tick(watch, answers, 1.6, moving=False)
    assert watch.suspects()


def test_reset_forgets_the_commits_seen() -> None:
    answers = Answers()
    watch = _watch(answers)
    _tick(watch, answers, 0.5, moving=True)
    watch.reset()
    _tick(watch, answers, 3.0, moving=False)
    assert not watch.suspects() and watch.quiet() and watch.moved_at is None


def test_blindness_counts_from_the_first_unanswered_question() -> None:
    answers = Answers()
    watch = _watch(answers)
    answers.now += 30.0  # a replica catching up before it stands: not blind
    _tick(watch, answers, 0.5, moving=True)
    assert watch.blind_s < 0.2
    answers.down = True
    _tick(watch, answers, 2.0, moving=False)
    assert 1.9 <= watch.blind_s <= 2.1 and not watch.quiet()
    answers.down = False
    _tick(watch, answers, 0.1, moving=False)
    assert watch.blind_s < 0.2


def test_after_kafka_was_away_a_standby_suspects_only_after_seeing_a_commit_again() -> None:
    """A restarted broker ended every master's transaction; the masters take over again,
    later than a standby's usual suspicion. Mutant caught: the commits seen before the
    outage kept, after which standbys fenced those retakes (57 takeovers for 8 partitions
    over 3 broker crashes)."""
    answers = Answers()
    watch = _watch(answers)
    _tick(watch, answers, 0.5, moving=True)
    _away(watch, answers, 2.0)
    _tick(watch, answers, 5.0, moving=False)
    assert watch.quiet() and not watch.suspects(), "the elected replica may still lead"
    _tick(watch, answers, 0.3, moving=True)
    _tick(watch, answers, 1.7, moving=False)
    assert watch.suspects()


def test_a_short_outage_leaves_the_silence_as_it_is() -> None:
    answers = Answers()
    watch = _watch(answers)
    _tick(watch, answers, 0.5, moving=True)
    _away(watch, answers, 1.0)
    _tick(watch, answers, 1.7, moving=False)
    assert watch.suspects()
