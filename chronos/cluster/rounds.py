"""What a cluster member does about ownership in one round: which partitions it claims, from
whom, and which it hands over (``docs/design/cluster-v2.md``, "The member").

A member of the second shape decides all of it in one place, on its delivery thread between
two transactions (``TransactionLoop``'s ``between``), from what changed since the last round:
the member list (Kafka's group), the peers its watch suspects (``group/peer_watch.py``), what
each hosted partition's progress log says of its holder (``group/claims.Ownership``), and
the readiness board (``readiness.py``); ``Holding`` is what a log says of its holder
(``group/claims.py``). This module is that decision as data, with no Kafka
in it, so that every rule below is tested alone; the member carries the plan out (claims
through ``group/claims.Claimant``, handovers through ``Lane.release``).

**Who should deliver p next** is the placement over the members this node does not suspect
(``placement.py``): a suspect's partitions fall to their first standby, which kept them warm.
Every member computes it from the same list; two members whose views differ (one suspects a
peer the other still hears) may both claim, and the claims in p's log order them: one wins,
the other delivers nothing (``group/claims.py``). A difference of views costs a handover,
never a duplicate.

**A claim** is made for a partition with a complete store here (``standing``: a claim from
an incomplete store would skip what it lacks), not delivered here and with no claim of this
node still undecided (that one is resumed, not repeated):

* whose holder handed it to this node (``released_to``), whatever this node's member list
  says (the holder's may be newer: the group is often still rebalancing when a leaving node
  hands over), made only if the log still says so when the claim reads it (``handed``);
* that the log says this node holds, whatever the placement says (a retake: its lane never
  started, or its loop was fenced, or the node it handed the partition to is gone before
  claiming it); a handover then moves it on. Without this a partition could wait for ever:
  its placed owner waits for a handover from a holder that delivers nothing;
* that this node should deliver next, when the log's holder is nobody (a new cluster, or a
  log of cuts only from before claims: taken from whoever holds it when the claim reads the
  log), this node (its producer was fenced, or it restarted: a retake, which wins where
  nobody claimed since), or suspected, or no longer a member and no longer heard (it left or
  Kafka expelled it without a handover, or it died before this node started watching it: a
  failover; the claimant fences it first). A holder that left the group but is still heard
  is handing its partitions over: its handover is waited for (a graceful leave costs one
  commit, not a fence).

A live holder that is a member and not suspected keeps the partition until it hands it over.

**A stand-in** claims a partition whose holder is gone (suspected, or no longer a member
nor heard) when the node it is placed on next has not said for ``STAND_IN_AFTER_S`` that its
replica stands (a new node still restoring it: a churn run measured such a partition
undelivered for 20 s while a warm copy stood elsewhere). The stand-in is the first node, in
the partition's placement chain and then in its rank over the other members, that said its
replica stands; the placed owner takes the partition over by a handover once its replica
stands. The wait leaves the placed owner its normal takeover (2-3 s), and the claims' order
settles two nodes that both thought themselves the stand-in.

**A handover** of a partition this node delivers goes to the partition's next deliverer once
that node said on the readiness board, after this node first saw the move, that its replica
stands (a node killed a moment ago said so before: its word then must not count).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from chronos.cluster.placement import Placement, rank
from chronos.group.claims import Holding

#: How long a partition whose holder is gone waits for its placed owner to stand before a
#: stand-in claims it (see the module's docstring), in seconds.
STAND_IN_AFTER_S = 3.0

#: Whether a node said, after a (monotonic) time, that its replica of a partition stands
#: (``ReadinessBoard.ready``).
Ready = Callable[[str, int, float], bool]


@dataclass(frozen=True)
class RoundView:
    """What a round decides from.

    Parameters:
        members: the cluster's member list (Kafka's group), this node's view.
        suspects: the peers this node's watch suspects now.
        delivering: the partitions this node's delivery loop carries (handed over: left out).
        standing: the partitions whose replica on this node stands (store complete, caught
            up): the only ones it may claim.
        holdings: what each hosted partition's log says of its holder (a partition missing
            is one whose log was not read yet: nothing is claimed for it).
        undecided: partitions with a claim of this node not decided yet.
        heard: the peers whose heartbeats arrive now (a node that left the group and still
            beats is handing over).
        leaving: this node is leaving (its member list leaves it out already): a
            successor's word on the board counts whenever it was said, not only after the
            move was seen, which guards a takeover from a node killed a moment ago.
    """

    members: frozenset[str]
    suspects: frozenset[str]
    delivering: frozenset[int]
    standing: frozenset[int]
    holdings: Mapping[int, Holding]
    undecided: frozenset[int] = frozenset()
    heard: frozenset[str] = frozenset()
    leaving: bool = False


@dataclass
class RoundPlan:
    """What a round does.

    Parameters:
        claims: partitions to claim, grouped by the holder each is taken from (the
            claimant's ``expected``: this node for a retake; None where the log names
            nobody). One ``claim_all`` per group: each holder is fenced once.
        handed: partitions their holder handed to this node, by holder (claimed only while
            the log says so: ``Claimant.claim_all(handed=True)``).
        resume: partitions whose undecided claim is read on.
        releases: partition -> the node it is handed to.
        stand_ins: the partitions among ``claims`` claimed in their placed owner's place
            (``Rounds._stands_in``), for the log.
    """

    claims: dict[str | None, list[int]] = field(default_factory=dict)
    handed: dict[str, list[int]] = field(default_factory=dict)
    resume: list[int] = field(default_factory=list)
    releases: dict[int, str] = field(default_factory=dict)
    stand_ins: list[int] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.claims or self.handed or self.resume or self.releases)


class Rounds:
    """Plans a member's rounds; keeps what one round must remember for the next: when this
    node first saw each partition it delivers placed elsewhere, and the placements of the
    last member lists (computed once per change, not per round).

    Parameters:
        node_id: this member's name.
        partitions: how many inner partitions the cluster has.
        standbys: standby replicas per partition.
        ready: the readiness board's answer.
    """

    def __init__(self, node_id: str, partitions: int, standbys: int, ready: Ready) -> None:
        self._node = node_id
        self._partitions = partitions
        self._standbys = standbys
        self._ready = ready
        self._placements: dict[frozenset[str], Placement] = {}
        #: Partition -> monotonic time this node first saw it delivered here and placed on
        #: another node.
        self._moving_since: dict[int, float] = {}
        #: Partition -> monotonic time this node first saw its holder gone and its placed
        #: owner (another node) not standing for it (``_stands_in``).
        self._orphaned_since: dict[int, float] = {}

    @property
    def node(self) -> str:
        """The node whose rounds these are."""
        return self._node

    def placement(self, members: frozenset[str]) -> Placement:
        """The placement over ``members`` (kept for the last two member sets asked for)."""
        placed = self._placements.get(members)
        if placed is None:
            placed = Placement.of(members, self._partitions, self._standbys)
            if len(self._placements) >= 2:
                self._placements.pop(next(iter(self._placements)))
            self._placements[members] = placed
        return placed

    def plan(self, view: RoundView, now: float) -> RoundPlan:
        """This round's claims and handovers; ``now`` is monotonic."""
        plan = RoundPlan()
        # A node not in the list (joining, or expelled) is placed nothing: it claims nothing,
        # and what it delivers goes to the others.
        next_owners = self.placement(view.members - view.suspects)
        for partition in sorted(view.undecided):
            plan.resume.append(partition)
        orphaned: set[int] = set()
        for partition in sorted(view.standing - view.delivering - view.undecided):
            holding = view.holdings.get(partition)
            if holding is None:
                continue
            if holding.released_to == self._node and holding.node is not None:
                # Handed to this node: whatever its own member list says (the holder's was
                # newer, or the group is still rebalancing), nobody else may claim it
                # without fencing the holder, which handed over and commits no more.
                plan.handed.setdefault(holding.node, []).append(partition)
                continue
            if holding.node == self._node and not self._handed_on(holding, view):
                plan.claims.setdefault(self._node, []).append(partition)
                continue
            if next_owners.owner(partition) != self._node:
                if self._stands_in(partition, holding, next_owners, view, now):
                    plan.claims.setdefault(holding.node, []).append(partition)
                    plan.stand_ins.append(partition)
                if partition in self._orphaned_since:
                    orphaned.add(partition)
                continue
            claims, expected = self._claims_from(holding, view)
            if claims:
                plan.claims.setdefault(expected, []).append(partition)
        self._orphaned_since = {p: self._orphaned_since[p] for p in orphaned}
        for partition in list(self._moving_since):
            if partition not in view.delivering:
                del self._moving_since[partition]
        for partition in sorted(view.delivering):
            successor = next_owners.owner(partition)
            if successor is None or successor == self._node:
                self._moving_since.pop(partition, None)
                continue
            since = self._moving_since.setdefault(partition, now)
            # A leaving node hands to live successors: their last word counts (its staleness
            # bounds it), not only one said after the move (a second's wait per leave).
            if self._ready(successor, partition, -math.inf if view.leaving else since):
                plan.releases[partition] = successor
        return plan

    def _stands_in(
        self, partition: int, holding: Holding, placed: Placement, view: RoundView, now: float
    ) -> bool:
        """Whether this node, not the partition's placed owner, claims it in the owner's
        place (see the module's docstring): its holder is gone, the owner has not stood for it
        since this node first saw that, for ``STAND_IN_AFTER_S``, and no node before this one
        in the partition's order said its replica stands."""
        holder = holding.node
        gone = holder is not None and (
            holder in view.suspects or (holder not in view.members and holder not in view.heard)
        )
        owner = placed.owner(partition)
        if not gone or owner is None or self._ready(owner, partition, -math.inf):
            self._orphaned_since.pop(partition, None)
            return False
        since = self._orphaned_since.setdefault(partition, now)
        if now - since < STAND_IN_AFTER_S:
            return False
        chain = placed.hosts.get(partition, ())
        others = rank(view.members - view.suspects - set(chain), partition)
        for node in [*chain[1:], *others]:
            if node == self._node:
                return True  # standing: only standing partitions are planned
            if self._ready(node, partition, -math.inf):
                return False  # an earlier node stands in
        return False

    @staticmethod
    def _handed_on(holding: Holding, view: RoundView) -> bool:
        """Whether this node, the holder, handed the partition to a node that may still
        claim it: listed and not suspected, or still heard."""
        successor = holding.released_to
        if successor is None or successor in view.suspects:
            return False
        return successor in view.members or successor in view.heard

    def _claims_from(self, holding: Holding, view: RoundView) -> tuple[bool, str | None]:
        """Whether this node claims a partition it should deliver next, and whom from (the
        claimant's ``expected``); a live holder keeps it until it hands it over."""
        holder = holding.node
        claims = (
            holder is None
            or holder == self._node
            or holding.released_to == self._node
            or holder in view.suspects
            or (holder not in view.members and holder not in view.heard)
        )
        return claims, holder
