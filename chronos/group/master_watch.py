"""Watching the master's commits: a failure detector faster than the election's session.

Why: the election group notices a dead master only after its session timeout, and Apache Kafka
refuses one below ``group.min.session.timeout.ms`` (6 s by default), so failover took 6-8 s.
A live master commits a progress record at least every ``group.progress_interval_ms`` (250 ms),
even with nothing due (``transactions.py``); the progress topic's end therefore moves while it
lives.

How a replica decides: it asks Kafka where the progress topic ends (the high watermark, which
also moves with records of open transactions) every ``_ASK_EVERY_S``, and calls the topic
*quiet* when the end stood still across answers spanning ``group.suspect_after_ms``, every two
of them at most ``_MAX_GAP_S`` apart. A backup starved of CPU, or a broker that does not answer,
breaks the chain of answers and starts it again: the silence is then the backup's or the
broker's, not the master's. ``replica.py`` acts on it:

* a replica that does not hold the election partition takes over when it *suspects*: quiet,
  and it saw the end move before the silence. A watch that was reset (this node led, or was
  demoted) needs that; one never reset since the node started does not, so a node restarted
  while the replica taking over is killed too need not wait for the session timeout;
* a replica that holds the election partition takes over once the topic is quiet, seen moving
  or not (a takeover killed before its first commit must not leave the group without a
  master), not before: a thawed zombie still holds the partition while its successor commits.

Why acting on a suspicion is safe: taking over fences. The new master's ``init_transactions``
ends the old one's producer, whose next commit fails, and it turns into a backup. A false
suspicion costs a handover, never a duplicate.

Failure cases:

* master killed, or its machine gone: taken over after ``suspect_after_ms`` and a takeover;
* master frozen (a GC pause, SIGSTOP) for longer: the same; when it thaws its next commit is
  fenced and it becomes a backup, and it does not take the role back while its successor
  commits, even holding the election partition;
* master cut off from Kafka: as frozen, from Kafka's side;
* broker frozen or down: no answers, no suspicion; after it returns the chain starts again.
  A restarted broker has ended every master's open transaction, and each master takes over
  again at once (``Replica._retakes``); but the masters learn of it only once the
  transaction coordinator answers, up to 4 s after the partitions do (measured, 3 nodes under
  load), and a retake's first commit came later than a standby's suspicion, which fenced it
  and took 1-1.5 s more. So after Kafka did not answer for ``suspect_after_s`` or more, the
  watch forgets the commits it saw, as after a reset: a standby suspects again only once it
  saw a commit and then a silence (not after a starved replica's gap: nothing broke the
  masters' transactions then). A master that died while the broker was away is left to the
  election (a cluster: the placement, once Kafka expires the dead member), which waits for
  an ordinary silence;
* a master that cannot commit for ``suspect_after_ms`` (transactions aborting): suspected; its
  successor meets the same trouble, but a demoted replica's watch must see a commit again
  before it suspects (the elected one excepted), so the role moves at most twice;
* a takeover longer than ``suspect_after_ms``: a replica just started, or the elected one, may
  fence it once; the fenced one's watch is reset, so there is no back and forth;
* several backups: each may act on its suspicion; fencing leaves one master, the others
  return to following;
* a new group (no cut committed yet): only the election picks the first master.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

#: Longest gap between two answers that still counts as continuous watching.
_MAX_GAP_S = 0.6
#: Shortest time between two questions to Kafka (a ListOffsets request each): about ten a
#: second from a replica loop ticking every 50 ms.
_ASK_EVERY_S = 0.09


class MasterWatch:
    """Answers "is a master committing?" from reads of the progress topic's end.

    Parameters:
        read_end: the progress topic's end offset now (raises when Kafka does not answer).
        suspect_after_s: how long the end must stand still, watched without a break.
        now: monotonic time source.
    """

    def __init__(
        self,
        read_end: Callable[[], int],
        suspect_after_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_end = read_end
        self.suspect_after_s = suspect_after_s
        self._now = now
        self._end: int | None = None
        #: When the current chain of unchanged answers began (None: no chain).
        self._still_since: float | None = None
        #: The current chain's last answer (None: no chain).
        self._last_answer: float | None = None
        #: When the end was last seen moving (None: never, since the start or a reset).
        self.moved_at: float | None = None
        #: Never reset: may suspect without having seen the end move.
        self._fresh = True
        self._asked_at: float | None = None
        #: The last answer at all, or when watching began (what ``blind_s`` counts from).
        self._answered_at = now()
        #: Whether a question went unanswered since the last answer (Kafka, not this
        #: replica's starved CPU, was away).
        self._unanswered = False

    def observe(self) -> None:
        """Ask (at most every ``_ASK_EVERY_S``); extend, restart or break the chain."""
        asked = self._now()
        if self._asked_at is not None and asked - self._asked_at < _ASK_EVERY_S:
            return
        if self._asked_at is None:
            self._answered_at = asked  # blindness counts from the first question
        self._asked_at = asked
        try:
            end = self._read_end()
        except Exception:
            self._still_since = self._last_answer = None
            self._unanswered = True
            return
        now = self._now()
        if self._last_answer is None or now - self._last_answer > _MAX_GAP_S:
            self._still_since = now  # a new chain: what happened meanwhile is unknown
            if self._unanswered and now - self._answered_at >= self.suspect_after_s:
                self.moved_at, self._fresh = None, False  # Kafka was away: see a commit first
        elif end != self._end:
            if self._end is not None:
                self.moved_at = now
            self._still_since = now
        self._end = end
        self._unanswered = False
        self._last_answer = self._answered_at = now

    @property
    def silent_s(self) -> float:
        """How long the end has stood still, watched without a break."""
        if self._still_since is None or self._last_answer is None:
            return 0.0
        return self._last_answer - self._still_since

    def quiet(self) -> bool:
        """Nobody committed for ``suspect_after_s``, watched without a break, whether or not
        anyone was seen committing before (what an elected replica waits for)."""
        return self.silent_s >= self.suspect_after_s

    def suspects(self) -> bool:
        """Quiet, and (after a reset) a master was seen committing before the silence: what a
        replica that does not hold the election partition acts on."""
        return (self._fresh or self.moved_at is not None) and self.quiet()

    @property
    def blind_s(self) -> float:
        """How long Kafka has not answered these questions (0 while it does)."""
        return max(0.0, self._now() - self._answered_at)

    def reset(self) -> None:
        """Forget what was seen (this node led: its own commits moved the end)."""
        self._end = self._still_since = self._last_answer = self.moved_at = None
        self._asked_at = None
        self._fresh = False
        self._answered_at = self._now()
