"""A replica's role over time: backup (follow the committed progress) or master (deliver).

Roles are start lists here too: a backup runs the follow worker, a master the transaction
loop; ingest, deletion and checkpoints run in both (``runtime/roles.py``). This controller moves
between them as the election and the publisher's fencing say.

Takeover (``_promote``), in this order, each step needed by the next:

1. ``init`` of the group's transactional publisher: the old master is fenced, its open
   transaction aborted, and a commit it had started is finished first.
2. Read the progress topic to its end: the last cut any master committed.
3. Wait until ingest stored every add below that cut, then apply it (seek, repeats).
4. Lead from the cut's seek: adds placed from now on go after it, and adds stored while
   following that the cut does not cover are moved after it (they were not delivered).
5. Wait (bounded) until ingest reached the inner topic's end, so cancels accepted before the
   takeover are applied before anything is delivered.
6. Deliver, with the next term.

A replica stands for election only once it may lead: ingest caught up with the inner topic,
and its store complete (``schedule/origin.py``): a store rebuilt from a topic whose head
retention removed waits for a refresh pass's floor to reach where it began. While it delivers,
it runs refresh passes (``node/refresh.py``, built by ``new_refresher``) whose floor its
progress records publish.

Demotion (election lost, or fenced): stop delivering at once (the open transaction is aborted),
place as a follower again, and follow the progress topic, without a restart. Kafka refusing
chronos' credentials is neither: the node ends (``lifecycle.Fatal``), since a takeover retried
every second could never succeed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog
from confluent_kafka import KafkaException

from chronos.clock import Clock
from chronos.group import announcement
from chronos.group.announcement import Announcer
from chronos.group.follower import Follower, FollowWorker, ProgressReader
from chronos.group.lane import MasterState
from chronos.group.master_watch import MasterWatch
from chronos.group.placement import ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.kafka.errors import Fenced, NotAuthorized
from chronos.kafka.publisher import TransactionalPublisher
from chronos.lifecycle import Component, Fatal, LoopWorker
from chronos.metrics import Metrics
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.origin import StoreOrigin
from chronos.schedule.progress_record import Cut

log = structlog.get_logger(__name__)

_TICK_S = 0.05
#: Pause before trying to lead again after a failed takeover or a fencing.
RETRY_S = 1.0
#: Shortest time between two retakes (``_retakes``): a producer that keeps breaking on its
#: own falls back to the usual pause and silence, so a standby may lead instead.
RETAKE_EVERY_S = 30.0
#: How long a backup waits for its spare producer's first answer from Kafka (``_keep_spare``).
_SPARE_CONNECT_S = 2.0


class Elector(Protocol):
    """What the controller needs of the election (``Election``, or a test's)."""

    @property
    def elected(self) -> bool: ...

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> None: ...


#: Builds the election, given the callback it reports changes to.
OpenElection = Callable[[Callable[[bool], None]], Elector]


class MasterLoop(Component, Protocol):
    """One term's delivery loop (``TransactionLoop``)."""

    #: Why it stopped delivering for good, else None.
    fenced: str | None
    #: Set once it committed its last record, handing the delivery over (``release``).
    released: threading.Event

    @property
    def term(self) -> int: ...

    @property
    def cut_offset(self) -> int | None:
        """The progress topic offset of its last committed cut (None before one)."""

    def release(self, successor: str) -> None: ...

    def close(self) -> None: ...


#: Builds one term's loop around an initialised publisher.
NewMaster = Callable[[TransactionalPublisher, MasterState], MasterLoop]
#: Builds the refresh worker of one term, moving the floor its progress records publish.
NewRefresher = Callable[[RebuildFloor], Component]
#: How often a replica that may not lead says why.
_NOT_ELIGIBLE_LOG_S = 30.0


class _TakeoverAborted(Exception):
    """The takeover could not complete (stopped, or lost the election meanwhile)."""


class Replica(LoopWorker):
    """Runs this node as its group's backup or master.

    Parameters:
        spec: the group.
        partitions: the inner partitions this group owns.
        store: the replica's writes to its store beyond ingest.
        open_election: builds the election, given the callback it reports changes to.
        progress: the progress topic reader.
        open_publisher: a new transactional publisher (``init`` not called).
        new_master: builds one term's delivery loop.
        new_refresher: builds the refresh worker a master runs.
        origin: where the store's ingest began (is it complete?).
        ingest_ready: whether ingest caught up with the inner topic.
        fatal: where a failure no retry can mend is reported (the node ends).
        clock: time source.
        metrics: counters.
        watch: the failure detector on the master's commits (``master_watch.py``); None:
            only the election decides (after its session timeout).
        announcer: says this replica's state in the members topic (``announcement.py``);
            None: says nothing.
    """

    def __init__(
        self,
        *,
        spec: GroupSpec,
        partitions: list[int],
        store: ReplicaStore,
        open_election: OpenElection,
        progress: ProgressReader,
        open_publisher: Callable[[], TransactionalPublisher],
        new_master: NewMaster,
        new_refresher: NewRefresher,
        origin: StoreOrigin,
        ingest_ready: Callable[[], bool],
        fatal: Fatal,
        clock: Clock,
        metrics: Metrics,
        watch: MasterWatch | None = None,
        announcer: Announcer | None = None,
    ) -> None:
        super().__init__("replica")
        self._watch = watch
        self._announcer = announcer
        #: Whether this term's master holds the election partition (a master that took over on
        #: suspicion gets it once the dead master's session expires; until then losing the
        #: election says nothing).
        self._by_election = False
        #: Whether the takeover in progress is the election's (it aborts if the election is
        #: lost meanwhile) or a suspicion's (it never held the partition).
        self._promoting_by_election = True
        self._deferred_logged = False
        #: The replica to hand the delivery to (``hand_over``), until that is done.
        self._handover_to: str | None = None
        #: Set once this replica is not delivering and no handover is pending.
        self.handed_over = threading.Event()
        self._spec = spec
        self._partitions = partitions
        self._store = store
        self._changed = threading.Event()
        self._election = open_election(self._on_election)
        self._log = progress
        self._open_publisher = open_publisher
        self._new_master = new_master
        self._new_refresher = new_refresher
        self._refresher: Component | None = None
        self._origin = origin
        self._ingest_ready = ingest_ready
        self._standing = False
        self._not_eligible_logged = -_NOT_ELIGIBLE_LOG_S
        self._fatal = fatal
        self._clock = clock
        self._metrics = metrics
        self._follower = Follower(store.apply_cut, lambda: store.inner_offsets(partitions))
        self._follow: FollowWorker | None = None
        self._master: MasterLoop | None = None
        #: The next master's producer, created and connected while this replica follows.
        self._spare: TransactionalPublisher | None = None
        self._retry_at = 0.0
        #: When this replica last took over again at once after its producer broke.
        self._retook_at = -RETAKE_EVERY_S
        #: "backup", "master", or "stopped" once this component stopped.
        self.role = "backup"

    @property
    def term(self) -> int:
        """The term this node leads in, or the last term it saw committed."""
        if self._master is not None:
            return self._master.term
        cut = self._follower.latest
        return 0 if cut is None else cut.term

    def _on_election(self, _elected: bool) -> None:
        self._changed.set()

    def _on_fenced(self, _reason: str) -> None:
        self._changed.set()

    @property
    def standing(self) -> bool:
        """Whether it stands for election: ingest caught up and its store complete."""
        return self._standing

    @property
    def complete(self) -> bool:
        """Whether the store holds everything it must (as of the latest progress read)."""
        return self._origin.complete(self._latest_floor())

    def _latest_floor(self) -> Floor | None:
        cut = self._follower.latest
        return None if cut is None else cut.floor

    def start(self) -> None:
        self._store.follow()
        self._start_following()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._changed.set()

    def hand_over(self, successor: str) -> None:
        """Stop delivering, handing over to ``successor`` (another replica's node id) with a
        last commit that names it (a graceful leave, or a cluster moving the partition):
        it takes over on reading that commit instead of after ``suspect_after_ms`` of
        silence. ``handed_over`` is set once this replica no longer delivers."""
        self._handover_to = successor
        self.handed_over.clear()
        self._changed.set()

    def step(self) -> None:
        self._changed.wait(_TICK_S)
        self._changed.clear()
        if not self._standing and not self._stand_when_eligible():
            return
        self._announce_role()
        master = self._master
        elected = self._election.elected
        if master is not None:
            self._by_election = self._by_election or elected
            if master.fenced is not None:
                retake = self._retakes(master.cut_offset)
                self._demote(f"fenced: {master.fenced}")
                if retake:
                    self._retake()
            elif master.released.is_set():
                self._demote(f"handed over to {self._handover_to}")
            elif self._handover_to is not None:
                master.release(self._handover_to)
            elif not elected and self._by_election:
                self._demote("election lost")
            if self._master is None:
                self._handover_to = None
                self.handed_over.set()
            return
        if self._handover_to is not None:
            self._handover_to = None
            self.handed_over.set()
        watch = self._watch
        if watch is not None:
            watch.observe()
        if time.monotonic() < self._retry_at or self._cannot_lead():
            return
        self._keep_spare()
        latest = self._follower.latest
        if (
            latest is not None
            and latest.released_to == self._spec.node_id
            and self._follower.read_to_end
        ):
            # The last master handed the delivery to this replica: nobody delivers until it
            # takes over, and nobody else will. Only once the topic was read to its end: a
            # replica restarted reads old handovers to it on the way (measured: one fenced a
            # live master).
            log.info("takeover_on_handover", node=self._spec.node_id, previous=latest.node)
            self._try_promote(by_election=False, handed=True)
            return
        if elected:
            if self._elected_may_lead(watch):
                self._try_promote(by_election=True)
            elif not self._deferred_logged:
                log.info("elected_waits_for_silence", node=self._spec.node_id)
                self._deferred_logged = True
        elif watch is not None and watch.suspects() and self._follower.latest is not None:
            # A committed cut: a master existed (a new group's first is the election's pick).
            log.warning(
                "suspected_master",
                node=self._spec.node_id,
                silent_ms=round(watch.silent_s * 1000),
                last_term=self.term,
            )
            self._try_promote(by_election=False)

    def _retakes(self, cut_offset: int | None) -> bool:
        """Whether this master, just fenced, takes over again at once.

        Why: a broker restart ends the open transaction of every master at once (measured on
        Apache Kafka 4.1.1: ``INVALID_TXN_STATE`` at commit, or ``PRODUCER_FENCED`` when the
        restart outlasted the transaction timeout and the coordinator bumped the epoch).
        Demoted, each waited ``RETRY_S`` and a silence while the standbys competed for the
        same partitions: deliveries came back 4-11 s after the broker, 31-65 takeovers for 8
        partitions over 3 crashes. The error cannot say whether another replica fenced it;
        the progress topic can: when its last committed cut is still this master's own, no
        other master delivered since, and this one takes over again. At worst it fences a
        takeover that has not committed yet, whose watch then waits to see a commit before
        it suspects again; two masters cannot both find their own cut last. A master frozen
        past its term (a thawed zombie) finds its successor's cut and steps down. A master
        of the election that lost it meanwhile does not retake (``_check_still_elected``).
        At most once per ``RETAKE_EVERY_S``: a producer that keeps breaking lets the
        standbys lead.

        The read starts at this term's last committed cut (``cut_offset``) and stops at the
        first cut of another master: a thawed zombie read its busy successor's whole term
        otherwise (up to 10 s; 135-282 ms since, measured)."""
        if self._cannot_lead():
            return False
        if time.monotonic() - self._retook_at < RETAKE_EVERY_S:
            return False
        term = self.term
        began = time.monotonic()
        try:
            self._check_still_elected()
            if cut_offset is not None:
                self._log.skip_to(cut_offset)
            cut = self._read_until_another_cut(term)
        except (_TakeoverAborted, KafkaException) as exc:
            log.info("retake_not_checked", node=self._spec.node_id, reason=str(exc))
            return False
        own = cut is None or self._own(cut, term)
        log.info(
            "retake_checked",
            node=self._spec.node_id,
            last_cut=None if cut is None else f"{cut.node} term {cut.term}",
            retakes=own,
            check_ms=round((time.monotonic() - began) * 1000),
        )
        return own

    def _own(self, cut: Cut, term: int) -> bool:
        return cut.node == self._spec.node_id and cut.term == term

    def _read_until_another_cut(self, term: int) -> Cut | None:
        """The progress topic's last committed cut, read to its end, or the first one of
        another master than this term's (the answer is known then: a zombie thawed under a
        busy successor spent up to 10 s reading all of the successor's records)."""
        end = self._log.end_offset(self._spec.settings.transaction_timeout_ms / 1000)
        while self._log.end_reached < end:
            self._check_still_elected()
            records = self._log.read(0.1)
            self._follower.take(records)
            another = next(
                (r for r in records if isinstance(r, Cut) and not self._own(r, term)), None
            )
            if another is not None:
                return another
        return self._follower.latest

    def _retake(self) -> None:
        self._retook_at = time.monotonic()
        self._retry_at = 0.0
        self._metrics.incr("retakes")
        log.warning("master_retakes", node=self._spec.node_id, last_term=self.term)
        self._try_promote(by_election=True)

    def _elected_may_lead(self, watch: MasterWatch | None) -> bool:
        """Holding the election partition is no reason to fence a master that commits: one
        that took over on suspicion while this node was frozen, or that this node, just
        started, has not watched long enough to see. So an elected replica waits until the
        progress topic stood still for ``suspect_after_ms`` (having seen a commit or not: a
        takeover killed before its first commit must not leave the group without a master),
        unless no master ever committed (a new group) or Kafka has not answered the watch for
        a session timeout (the election alone decides then, as without a watch).

        Either only once the progress topic was read to its end: a node restarted on its
        store stands before that. Deciding on what it had read so far, one took over from a
        live owner that was about to hand it the partition (a 4.5 s fight, the owner
        retaking), and one, still reading, let a handover to it pass and waited out the
        silence after it (2.8 s without deliveries; measured, ``cluster_check.py``)."""
        if watch is None:
            return True
        if watch.blind_s >= self._spec.settings.session_timeout_ms / 1000.0:
            return True
        if not self._follower.read_to_end:
            return False
        return self._follower.latest is None or watch.quiet()

    def _try_promote(self, by_election: bool, handed: bool = False) -> None:
        self._deferred_logged = False
        self._promoting_by_election = by_election
        try:
            self._promote(handed)
            self._by_election = by_election
            if self._watch is not None:
                self._watch.reset()  # from now on the end moves with this node's commits
        except Exception as exc:  # any failure: stay a backup that follows, try again later
            expected = isinstance(exc, (_TakeoverAborted, Fenced, KafkaException))
            log.warning(
                "takeover_failed",
                reason=str(exc) if expected else repr(exc),
                retry_in_s=RETRY_S,
                exc_info=not expected,
            )
            self._retry_at = time.monotonic() + RETRY_S
            self._store.follow()
            if self._follow is None:
                self._start_following()

    def _keep_spare(self) -> None:
        """Have the next master's producer created and connected before a takeover needs it.

        Why: ``init_transactions`` on a producer created at the takeover first waits for its
        connection, and librdkafka retries a coordinator lookup that found no connection
        after 500 ms; measured on Apache Kafka 4.1.1, idle: 60-520 ms (about one in three
        slow), against 5-20 ms on a producer that had already asked the broker something,
        seconds before. That was most of a handover's delivery gap. The spare does not init:
        creating a producer with the transactional id fences nobody."""
        if self._spare is not None:
            return
        spare = self._open_publisher()
        try:
            spare.topic_exists(self._spec.progress_topic, _SPARE_CONNECT_S)
        except KafkaException as exc:  # kept anyway: it connects meanwhile
            log.debug("spare_producer_not_connected", error=str(exc.args[0]))
        self._spare = spare

    def _close_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()

    def _stand_when_eligible(self) -> bool:
        """Join the election once ingest caught up and the store is complete (True then);
        until then say why, every so often (a store that cannot prove it holds every message
        never leads).

        Incomplete is said only once the progress topic was read to its end: before that, the
        floor that covers this store may simply not have been read yet (every healthy disk
        replacement would report itself incomplete once)."""
        ready = self._ingest_ready()
        read_to_end = self._follower.read_to_end
        floor = self._latest_floor()
        missing = self._origin.missing(floor)
        if ready and not missing:
            self._election.start()
            self._standing = True
            log.info("replica_eligible", node=self._spec.node_id, began=self._origin.began)
            return True
        incomplete = bool(missing) and read_to_end
        floor_offsets = None if floor is None else dict(floor.offsets)
        detail: dict[str, object]
        if incomplete:
            detail = {"began": missing, "floor": floor_offsets}
            self._say(announcement.INCOMPLETE, detail)
        else:
            waits_for = "ingest" if read_to_end else "progress topic"
            detail = {"began": dict(self._origin.began), "waits_for": waits_for}
            self._say(announcement.RESTORING, detail)
        now = time.monotonic()
        if now - self._not_eligible_logged < _NOT_ELIGIBLE_LOG_S:
            return False
        self._not_eligible_logged = now
        if incomplete:
            log.error(
                "replica_incomplete",
                node=self._spec.node_id,
                began=missing,
                floor=floor_offsets,
                effect="not standing for election: the inner topic no longer holds every "
                "record this store would need; it becomes complete once the master's next "
                "refresh pass publishes a floor at or above where it began",
            )
        else:
            log.info("replica_restoring", node=self._spec.node_id, **detail)
        return False

    def _announce_role(self) -> None:
        if self._master is not None:
            self._say(announcement.MASTER, {"term": self._master.term})
        else:
            self._say(announcement.ELIGIBLE, {})

    def _say(self, state: str, detail: dict[str, object]) -> None:
        if self._announcer is not None:
            self._announcer.say(state, detail)

    def _cannot_lead(self) -> bool:
        return self.stopping or self._fatal.reason is not None

    def finish(self) -> None:
        if self._master is not None:
            self._stop_delivering()
        if self._standing:
            self._election.stop()
            self._election.join(10.0)
        self._stop_following()
        self._close_spare()
        self._log.close()
        self.role = "stopped"
        self._say(announcement.STOPPED, {})

    # -- backup -------------------------------------------------------------------------------

    def _start_following(self) -> None:
        self._follow = FollowWorker(self._log, self._follower)
        self._follow.start()
        self.role = "backup"

    def _stop_following(self) -> None:
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.stop()
            follow.join(10.0)

    # -- master -------------------------------------------------------------------------------

    def _promote(self, handed: bool) -> None:
        """Fence, read the committed progress, apply the cut, lead.

        A takeover on a handover (``handed``) does not wait for ingest to reach the inner
        topic's end: the partition delivers nothing until this master commits, and the cancel
        gate (``node/watermark.py``) already holds every slot that ingest has not covered. The
        wait was the largest step of a handover (p50 160 ms, up to 620 ms)."""
        started = time.monotonic()
        timeout_s = self._spec.settings.transaction_timeout_ms / 1000.0
        log.info("takeover_started", node=self._spec.node_id)
        if self._follow is not None:
            # Asked now, waited for after the fencing: its last poll ends meanwhile.
            self._follow.stop()
        publisher, self._spare = self._spare or self._open_publisher(), None
        try:
            self._fence(publisher, timeout_s)
            fenced_at = time.monotonic()
            self._stop_following()
            followed_at = time.monotonic()
            cut = self._read_committed_progress(timeout_s)
            read_at = time.monotonic()
            self._catch_up_to(cut)
            seek = self._store.lead(
                cut.seek_ms if cut is not None else self._store.seek_ms, self._partitions
            )
            moved = self._store.relocate_uncovered(
                seek, cut.offsets if cut is not None else {}, self._partitions
            )
            stored_at = time.monotonic()
            caught_up = None if handed else self._wait_ingest_end()
        except BaseException:
            publisher.close()
            self._stop_following()  # a retry starts following again (``_try_promote``)
            raise
        term = (cut.term if cut is not None else 0) + 1
        floor = RebuildFloor(cut.floor if cut is not None else None)
        self._master = self._new_master(
            publisher,
            MasterState(
                term,
                self._on_fenced,
                self._fatal.report,
                floor,
                paced=cut.paced if cut is not None else {},
                ahead_ms=cut.ahead_ms if cut is not None else None,
            ),
        )
        self._master.start()
        self._refresher = self._new_refresher(floor)
        self._refresher.start()
        self.role = "master"
        self._metrics.incr("promotions")
        # The group delivered nothing between the old master's last commit and now: the
        # failover as the group saw it (clocks of two machines: approximate).
        gap_ms = None if cut is None else self._clock.now_ms() - cut.committed_at_ms
        if gap_ms is not None:
            self._metrics.observe("failover_gap_ms", gap_ms)
        log.info(
            "became_master",
            node=self._spec.node_id,
            term=term,
            seek_ms=seek,
            previous_master=cut.node if cut is not None else None,
            relocated=moved,
            ingest_caught_up=caught_up,
            fence_ms=round((fenced_at - started) * 1000),
            takeover_ms=round((time.monotonic() - started) * 1000),
            # Where a takeover's time goes (ms from its start), for the handover gap.
            phases_ms={
                "followed": round((followed_at - started) * 1000),
                "progress_read": round((read_at - started) * 1000),
                "cut_applied": round((stored_at - started) * 1000),
            },
            since_last_commit_ms=gap_ms,
        )

    def _fence(self, publisher: TransactionalPublisher, timeout_s: float) -> None:
        """Step 1: ``init`` fences the previous master. Refused credentials end the node."""
        try:
            publisher.init(timeout_s)
        except NotAuthorized as exc:
            self._fatal.report(str(exc))
            raise _TakeoverAborted(str(exc)) from exc
        except KafkaException as exc:
            raise _TakeoverAborted(f"init_transactions: {exc.args[0]}") from exc

    def _read_committed_progress(self, timeout_s: float) -> Cut | None:
        """Everything committed to the progress topic, up to its end after the fencing."""
        end = self._log.end_offset(timeout_s)
        while self._log.end_reached < end:
            self._check_still_elected()
            self._follower.take(self._log.read(0.1))
        return self._follower.latest

    def _catch_up_to(self, cut: Cut | None) -> None:
        """Apply every committed record: ingest must first store all adds below the cut."""
        deadline = time.monotonic() + self._spec.settings.takeover_catch_up_s
        while self._follower.waiting:
            self._follower.apply_covered()
            if not self._follower.waiting:
                break
            self._check_still_elected()
            if time.monotonic() > deadline:
                raise _TakeoverAborted(
                    f"ingest did not reach the committed cut {cut.offsets if cut else {}} "
                    f"(store at {self._store.inner_offsets(self._partitions)})"
                )
            time.sleep(0.01)

    def _wait_ingest_end(self) -> bool:
        """Wait, bounded, until ingest stored the inner topic up to its end as of now."""
        wait_s = self._spec.settings.takeover_catch_up_s
        deadline = time.monotonic() + wait_s
        topic = self._spec.inner_topic
        ends = {p: self._log.end_offset(wait_s, topic, p) for p in self._partitions}
        while True:
            stored = self._store.inner_offsets(self._partitions)
            if all(stored.get(p, 0) >= end for p, end in ends.items()):
                return True
            self._check_still_elected()
            if time.monotonic() > deadline:
                log.warning("takeover_before_ingest_caught_up", stored=stored, ends=ends)
                return False
            time.sleep(0.01)

    def _check_still_elected(self) -> None:
        if self.stopping:
            raise _TakeoverAborted("stopping")
        if self._promoting_by_election and not self._election.elected:
            raise _TakeoverAborted("election lost during the takeover")

    def _demote(self, reason: str) -> None:
        term = self.term
        self._stop_delivering()
        self._store.follow()
        self._start_following()
        self._retry_at = time.monotonic() + RETRY_S
        if self._watch is not None:
            self._watch.reset()
        self._metrics.incr("demotions")
        log.warning("became_backup", node=self._spec.node_id, term=term, reason=reason)

    def _stop_delivering(self) -> None:
        refresher, self._refresher = self._refresher, None
        if refresher is not None:
            refresher.stop()
            refresher.join(5.0)
        master, self._master = self._master, None
        if master is None:
            return
        master.stop()
        master.join(self._spec.settings.transaction_timeout_ms / 1000.0 + 5)
        if not master.is_alive():
            try:
                master.close()
            except Exception:  # the demotion must complete: a master that never follows
                log.exception("master_close_failed", term=master.term)
