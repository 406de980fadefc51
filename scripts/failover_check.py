#!/usr/bin/env python3
"""Failover check of a replica group: a master and a backup as separate processes under load.

A steady load (default 2,000 requests/s, delays 0-5 s, 10 % cancelled before due, 2 % repeats,
5 % of the other one-shots rescheduled to 0-20 s from then, ``--reschedule``) runs while a
scenario hurts the group; afterwards a ``read_committed`` consumer must have seen every expected
delivery exactly once (repeats: every occurrence once, at the due time its schedule gives,
overdue ones collapsed as documented; ``--cron-share``: that share of cron repeats in a zone),
none early and no cancelled one (a cancel acknowledged only after its message's due time, the
broker being down meanwhile, may lose that race: counted apart, not failed on). A reschedule
acknowledged at least ``node.cancel_margin_ms`` before its message's first due time must be
applied: delivered once, at the new due time, not before it (``reschedules_not_applied``,
``early``); one acknowledged later may have come too late, and is delivered at one of the two
(as is every one when an earlier release runs: ``--release``, ``--from-image``). A
``read_uncommitted`` consumer's duplicates (records of aborted transactions) are counted and
reported, not failed on.

Scenarios (``--scenario``):

* ``kill``: kill -9 the current master ``--kills`` times, every ``--interval`` s, restarting
  each killed node once the other took over, so it rejoins as backup. Failover time: kill to
  the new master's first committed delivery transaction.
* ``zombie``: SIGSTOP the master past the session timeout, let the backup take over, SIGCONT
  the old master: it must log that it was fenced and become a backup.
* ``both``: kill -9 both replicas at once, restart both.
* ``stop-all``: stop the whole group (SIGTERM) for ``--down`` s (300) while the load goes on,
  then start it again: overdue repeat occurrences follow their catch-up policy (with
  ``--cron-share``: ``cron_all_collapsed`` stays 0 while ``--down`` is within
  ``delivery.catch_up_window_s``, ``cron_latest_collapsed`` counts the folded ones).
* ``takeover-kill``: kill -9 the master and restart it at once; kill -9 the backup as soon as
  it starts taking over (``takeover_started``), then restart it: the restarted first node must
  lead. Failover time: the first kill to the first commit of the master that remains.
* ``join-kill``: kill -9 the backup and restart it; one second after it stands for election
  (``replica_eligible``), kill -9 the master. Failover time: that kill to the new master's
  first commit.
* ``steady``: no fault for ``--duration`` s: any takeover after the first master's is a false
  one (the failure detector suspected a live master) and fails the check.
* ``lagging``: stop the backup for ``--backup-down`` s while the master delivers, restart it,
  let it catch up, then kill -9 the master.
* ``broker-freeze``: SIGSTOP the broker for ``--freeze`` s (a broker this script started), then
  resume: exactly one master afterwards and deliveries flowing again.
* ``rolling``: the rolling restart of docs/containers.md, ``--kills`` rounds: stop the backup
  gracefully (SIGTERM), start it again on this tree (or ``--image``), wait for its
  ``/readyz``, then do the same to the master (the backup takes over; failover time: the stop
  to the first commit in a newer term). With ``--release`` or ``--from-image`` the first round
  is an upgrade from an earlier release, and the load's reschedules meet a master that does not
  know them.
* ``chaos``: ``--replicas`` replicas (3, say), a fault every ``--interval`` s for
  ``--duration`` s, drawn at random (``--seed``) from: kill -9 a replica, SIGTERM one, SIGSTOP
  one for 10 s, kill -9 one and start it on an empty disk, kill -9 the master, and (Apache
  Kafka started here) kill -9 the broker and start it again 5 s later on its data, alone or
  followed by kill -9 of the master once a master commits again (``broker-master``: a broker
  restart ends every open transaction, the master retakes, and reschedules it moved in the
  meantime meet a failover before their new due time, issue 59). A stopped replica is started
  again at once.
* ``mixed`` (with ``--release`` or ``--from-image``): an upgrade left half done. The backup is
  upgraded; the master, killed, comes back on the earlier release and follows the upgraded one
  (reschedules it decides included); then that one is killed and the earlier release delivers.

Replicas run as processes of this tree, of an earlier release's checkout (``--release DIR``,
e.g. ``git worktree add DIR <commit>``: its code, this environment's dependencies), or as
containers of the chronos image (``--image chronos:local``, host networking, the store on a
named volume; ``--from-image`` to start on another image). Every scenario also reports the
longest time no delivery became visible while the load ran (``longest_gap_ms``).

    python scripts/failover_check.py                       # kill, 10 kills, Apache Kafka
    python scripts/failover_check.py --scenario zombie
    python scripts/failover_check.py --scenario rolling --kills 2 --image chronos:local
    python scripts/failover_check.py --scenario rolling --kills 1 --release /tmp/chronos-0.23
    python scripts/failover_check.py --scenario lagging --backup-down 600
    python scripts/failover_check.py --scenario chaos --replicas 3 --rate 500 --duration 600

The last line of output is the JSON summary. Exit code 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from chronos.devstack.check import Tally, Watched, add_broker_options, finish, staged
from chronos.devstack.container import DATA_PATH, ContainerNode
from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.process import NodeProcess
from chronos.devstack.watch import Collected, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.quantiles import percentile
from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.settings import load_settings
from proxy.client import DelayClient, DelayRequest, Receipt

GROUP = "g"
#: The margin a reschedule must be acknowledged by before its first due time to be applied
#: for sure: ``node.cancel_margin_ms``'s default (the cancel gate holds reschedules too).
RESCHEDULE_MARGIN_MS = 250
#: How long the chaos scenario freezes a replica, and keeps the broker down.
FREEZE_S = 10.0
BROKER_DOWN_S = 5.0
#: Repeats: long enough intervals that a failover never makes an occurrence overdue by more
#: than one interval, so every occurrence is delivered on its own.
REPEAT = Repeat(RepeatKind.FIXED, interval_ms=10_000, times=3)
#: Cron repeats (``--cron-share``): every 10 s of a zone's wall clock, not UTC's.
CRON = Repeat.calendar("*/10 * * * * *", "Asia/Kolkata", times=3)
#: Half of them catch up with the latest occurrence only.
CRON_LATEST = Repeat.calendar("*/10 * * * * *", "Asia/Kolkata", times=3, catch_up=CatchUp.LATEST)


@dataclass
class Expected:
    due_ms: int
    times: int = 1
    #: The repeat, whose schedule every delivered occurrence's due time must follow.
    repeat: Repeat | None = None
    cancelled: bool = False
    #: The cancel was acknowledged only after the due time (the broker was down meanwhile):
    #: it may or may not win, and neither outcome is a fault.
    cancel_late: bool = False
    #: The due time a reschedule asked for (one-shots only).
    rescheduled_to: int | None = None
    #: The reschedule was acknowledged ``RESCHEDULE_MARGIN_MS`` before the first due time:
    #: it must be applied. Else delivered at one of the two, whichever the master decided.
    reschedule_strict: bool = False


@dataclass
class Summary(Tally):
    scenario: str
    broker: str
    scheduled: int = 0
    #: What the load really offered, requests/s (``--rate`` is what it aimed at).
    requests_per_s: int = 0
    repeats: int = 0
    cancelled: int = 0
    expected_deliveries: int = 0
    delivered: int = 0
    cancelled_delivered: int = 0
    #: Cancels acknowledged after their message's due time: not counted as cancelled.
    cancels_acknowledged_after_due: int = 0
    rescheduled: int = 0
    rescheduled_moved: int = 0
    rescheduled_wrong_due: int = 0
    #: Reschedules acknowledged in time (``Expected.reschedule_strict``), and those of them
    #: whose message was delivered at another due time than the new one.
    reschedules_strict: int = 0
    reschedules_not_applied: int = 0
    repeat_occurrences_collapsed: int = 0
    cron_repeats: int = 0
    #: Occurrences folded into a later one (``chronos-skipped``), per cron catch-up policy:
    #: ``all`` folds none that were overdue by less than ``delivery.catch_up_window_s``.
    cron_all_collapsed: int = 0
    cron_latest_collapsed: int = 0
    #: Occurrences delivered with a due time their repeat's schedule does not give.
    repeat_wrong_due: int = 0
    uncommitted_duplicates: int = 0
    kills: int = 0
    failovers: int = 0
    failover_p50_ms: int = 0
    failover_max_ms: int = 0
    failover_ms: list[int] = field(default_factory=list)
    zombie_fenced: int = 0
    masters_at_end: int = 0
    #: Takeovers after the first master's, beyond one per failover (needless handovers).
    extra_takeovers: int = 0
    suspicions: int = 0
    flowing_again_after_ms: int | None = None
    visible_lateness_p50_ms: int = 0
    visible_lateness_p99_ms: int = 0
    visible_lateness_max_ms: int = 0
    #: The longest time without a delivery becoming visible while the load ran (from its
    #: sixth second, when deliveries flow, to its end), and where it began.
    longest_gap_ms: int = 0
    longest_gap_at_s: float = 0.0
    upgraded: int = 0
    #: The chaos scenario's faults, in order.
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exact and not (
            self.cancelled_delivered
            or self.rescheduled_wrong_due
            or self.reschedules_not_applied
            or self.repeat_wrong_due
            or self.problems
        )


@dataclass(frozen=True)
class Runtime:
    """What the replicas run: processes of this tree or of an earlier release's checkout, or
    containers of an image; ``upgraded`` is what a rolling upgrade restarts them on."""

    release: Path | None = None
    image: str | None = None
    from_image: str | None = None

    def upgraded(self) -> Runtime:
        return Runtime(image=self.image)


class Replica:
    """One node of the group (a process or a container) and what its log says about its role."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        bootstrap: str,
        namespace: str,
        group: str | None = GROUP,
        extra: str = "",
        runtime: Runtime = Runtime(),
    ) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        #: The store of a process replica (a container's is on its volume).
        self.data_dir = workdir / f"store-{name}"
        self._workdir, self._bootstrap, self._namespace = workdir, bootstrap, namespace
        self._group, self._extra = group, extra
        self.runtime = runtime
        self.config = self._write_config(runtime)
        self.process: NodeProcess = self._runner(runtime)
        self._listening_before = 0

    def _write_config(self, runtime: Runtime) -> Path:
        earlier = runtime.release is not None or runtime.from_image is not None
        data_dir = f"{DATA_PATH}/store" if runtime.image else self.data_dir
        group_section = f'[group]\nname = "{self._group}"\n' if self._group else ""
        # An earlier release may not know [admin] (its settings refuse unknown keys).
        # A free port, read back from admin_listening (a port picked ahead could be taken).
        admin = "" if earlier else '[admin]\nhost = "127.0.0.1"\nport = 0\n'
        config = self._workdir / f"{self.name}{'-earlier' if earlier else ''}.toml"
        config.write_text(
            f"""[kafka]
bootstrap_servers = "{self._bootstrap}"
[topics]
namespace = "{self._namespace}"
inner_partitions = 4
[node]
node_id = "{self.name}"
data_dir = "{data_dir}"
ingest_threads = 1
{group_section}{admin}[log]
format = "json"
{self._extra}"""
        )
        config.chmod(0o644)  # a container's user reads it
        return config

    def _runner(self, runtime: Runtime) -> NodeProcess:
        if runtime.image is not None:
            if runtime.from_image is not None:  # an earlier release: no admin API
                return ContainerNode(
                    name=f"chronos-{self._namespace}-{self.name}",
                    image=runtime.from_image,
                    config=self.config,
                    log_path=self.log_path,
                    ready_event="ingest_caught_up",
                    unset_env=("CHRONOS_ADMIN__PORT", "CHRONOS_NODE__CHECKPOINT_DIR"),
                )
            return ContainerNode(
                name=f"chronos-{self._namespace}-{self.name}",
                image=runtime.image,
                config=self.config,
                log_path=self.log_path,
                ready_event="ingest_caught_up",
                # The image sets port 9400; two nodes on the host's network need two.
                env={"CHRONOS_ADMIN__PORT": "0"},
            )
        return NodeProcess(
            self.config, self.log_path, ready_event="ingest_caught_up", source=runtime.release
        )

    def switch(self, runtime: Runtime) -> None:
        """Run ``runtime`` from the next start on (the node is stopped)."""
        assert not self.process.running()
        self.runtime = runtime
        self.config = self._write_config(runtime)
        self.process = self._runner(runtime)

    def start(self) -> None:
        """Start the node; ``wait_readyz`` then looks for this run's admin port."""
        self._listening_before = len(self.events("admin_listening"))
        self.process.start()

    def wait_readyz(self, timeout_s: float) -> bool:
        """True once this run's admin API answers ``/readyz`` with 200 (caught up, complete and
        eligible): the rolling restart's signal that the next node may go."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.process.running():
                raise RuntimeError(f"{self.name} exited, see {self.log_path}")
            listening = self.events("admin_listening")[self._listening_before :]
            if listening:
                url = f"http://127.0.0.1:{listening[-1]['port']}/readyz"
                try:
                    with urllib.request.urlopen(url, timeout=2) as response:
                        if response.status == 200:
                            return True
                except (OSError, urllib.error.HTTPError):
                    pass
            time.sleep(0.1)
        return False

    def events(self, *names: str) -> list[dict[str, Any]]:
        """This node's log events with these names, oldest first."""
        return log_events(self.log_path, *names)

    def is_master(self) -> bool:
        """Its last role event says master (and it runs)."""
        roles = self.events("became_master", "became_backup", "node_started")
        return self.process.running() and bool(roles) and roles[-1].get("event") == "became_master"

    def term(self) -> int:
        terms = [int(e.get("term", 0)) for e in self.events("became_master")]
        return max(terms, default=0)


def log_events(path: Path, *names: str) -> list[dict[str, Any]]:
    """A node's JSON log events with these names, oldest first (none before it wrote any)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") in names:
            out.append(event)
    return out


def _epoch_ms(event: dict[str, Any]) -> int:
    stamp = str(event["timestamp"]).replace("Z", "+00:00")
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


class Group:
    def __init__(
        self,
        workdir: Path,
        bootstrap: str,
        namespace: str,
        extra: str = "",
        runtime: Runtime = Runtime(),
        replicas: int = 2,
    ) -> None:
        names = [chr(ord("a") + n) for n in range(replicas)]
        self.replicas = [
            Replica(n, workdir, bootstrap, namespace, extra=extra, runtime=runtime) for n in names
        ]

    def start(self) -> Replica:
        """Start the first replica, wait until it is master, then its backups until they are
        ready: where every scenario begins. Returns the master."""
        self.replicas[0].process.start()
        first = self.master(timeout_s=120)
        for backup in self.replicas[1:]:
            backup.process.start()
        for backup in self.replicas[1:]:
            backup.process.wait_ready(60)
        return first

    def master(self, timeout_s: float = 60.0, newer_than: int = 0) -> Replica:
        """The replica that is master with a term above ``newer_than``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for replica in self.replicas:
                if replica.is_master() and replica.term() > newer_than:
                    return replica
            time.sleep(0.05)
        raise RuntimeError(f"no master with a term above {newer_than} within {timeout_s} s")

    def first_commit_after(self, term: int, timeout_s: float = 60.0) -> tuple[Replica, int]:
        """The replica that first committed in a term above ``term``, and when (epoch ms). Not
        the first to become master: when replicas race to take over, that one may be fenced
        before it commits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [
                (_epoch_ms(event), replica)
                for replica in self.replicas
                for event in replica.events("master_first_commit")
                if int(event.get("term", 0)) > term
            ]
            if found:
                first_ms, replica = min(found, key=lambda pair: pair[0])
                return replica, first_ms
            time.sleep(0.05)
        raise RuntimeError(f"no commit in a term above {term} within {timeout_s} s")

    def other(self, replica: Replica) -> Replica:
        return next(r for r in self.replicas if r is not replica)


class Load:
    """Steady requests at ``rate`` per second until stopped; remembers what it expects."""

    def __init__(
        self,
        client: DelayClient,
        topic: str,
        rate: int,
        seed: int,
        delay_s: tuple[float, float] = (0.0, 5.0),
        repeat: Repeat = REPEAT,
        reschedule_share: float = 0.05,
        senders: int = 4,
        cron_share: float = 0.0,
        reschedule_max_s: float | None = None,
        strict_reschedules: bool = True,
    ) -> None:
        self._client = client
        self._reschedule_share = reschedule_share
        #: Default: 20 s, or the longest delay when that is longer.
        self._reschedule_max_s = reschedule_max_s or max(delay_s[1], 20.0)
        #: Whether a reschedule acknowledged in time must be applied (every node knows them).
        self._strict_reschedules = strict_reschedules
        self.delay_s = delay_s
        self._topic = topic
        self.repeat = repeat
        self._cron_share = cron_share
        self._stop = threading.Event()
        # Each request waits for Kafka's acknowledgement, and a tick makes several: one sender
        # reached a third of 2,000 requests/s once the broker answered in 30-50 ms.
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(random.Random(seed + i), rate / senders, i / senders),
                name=f"load-{i}",
                daemon=True,
            )
            for i in range(senders)
        ]
        self.expected: dict[str, Expected] = {}
        self.errors: list[str] = []
        #: Wall-clock ms when it started and stopped sending.
        self.started_ms = 0
        self.stopped_ms = 0

    def start(self) -> None:
        self.started_ms = int(time.time() * 1000)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        self.stopped_ms = int(time.time() * 1000)

    @property
    def achieved_rate(self) -> float:
        """Requests scheduled per second while it ran (what the load really offered)."""
        seconds = (self.stopped_ms - self.started_ms) / 1000
        return len(self.expected) / seconds if seconds > 0 else 0.0

    def _run(self, rng: random.Random, rate: float, phase: float) -> None:
        """One sender: ``rate`` requests/s in ticks, started ``phase`` of a tick late."""
        tick = 0.05
        per_tick = max(1, round(rate * tick))
        next_at = time.monotonic() + phase * tick
        while not self._stop.is_set():
            requests = []
            for _ in range(per_tick):
                draw = rng.random()
                if draw < 0.02:
                    repeat: Repeat | None = self.repeat
                elif draw < 0.02 + self._cron_share:
                    repeat = CRON if draw < 0.02 + self._cron_share / 2 else CRON_LATEST
                else:
                    repeat = None
                requests.append(
                    DelayRequest(
                        self._topic,
                        rng.randbytes(32),
                        delay=rng.uniform(*self.delay_s),
                        repeat=repeat,  # the id the client makes up, as a proxy's users get
                    )
                )
            try:
                receipts = self._client.send_batch(requests)
            except Exception as exc:  # a broker freeze: keep trying, report it
                self.errors.append(str(exc))
                continue
            now_ms = int(time.time() * 1000)
            for request, receipt in zip(requests, receipts, strict=True):
                times = request.repeat.times if request.repeat else 1
                self.expected[receipt.id] = Expected(receipt.deliver_at_ms, times, request.repeat)
            ahead = [
                receipt.id
                for request, receipt in zip(requests, receipts, strict=True)
                if request.repeat is None and receipt.deliver_at_ms - now_ms >= 1500
            ]
            # A tenth of the requests, drawn one by one: a tick of fewer than 5 requests (a
            # sender's share below 400 requests/s) rounded a tenth of it down to none.
            wanted = sum(rng.random() < 0.1 for _ in requests)
            chosen = rng.sample(ahead, min(len(ahead), wanted))
            try:
                if chosen:
                    self._client.cancel_batch(chosen)
                acknowledged_ms = int(time.time() * 1000)
                for message_id in chosen:
                    expected = self.expected[message_id]
                    expected.cancelled = True
                    expected.cancel_late = acknowledged_ms >= expected.due_ms
            except Exception as exc:
                self.errors.append(f"cancel: {exc}")
            self._reschedule(requests, receipts, set(chosen), now_ms, rng)
            next_at += tick
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_at = time.monotonic()

    def _reschedule(
        self,
        requests: list[DelayRequest],
        receipts: list[Receipt],
        cancelled: set[str],
        now_ms: int,
        rng: random.Random,
    ) -> None:
        """Move ``reschedule_share`` of the one-shots still 1.5 s or more ahead to a new time
        up to ``reschedule_max_s`` ahead, sooner or later: the longer ones meet more faults
        between the reschedule and their due time (issue 59). By the receipts' ids: the
        requests carry none (the client makes them up)."""
        for request, receipt in zip(requests, receipts, strict=True):
            message_id = receipt.id
            if message_id in cancelled or request.repeat is not None:
                continue
            expected = self.expected[message_id]
            if expected.due_ms - now_ms < 1500 or rng.random() >= self._reschedule_share:
                continue
            try:
                delay = rng.uniform(self.delay_s[0], self._reschedule_max_s)
                moved = self._client.reschedule(message_id, delay=delay)
                acknowledged_ms = int(time.time() * 1000)
                expected.rescheduled_to = moved.deliver_at_ms
                margin = expected.due_ms - acknowledged_ms
                strict = self._strict_reschedules and margin >= RESCHEDULE_MARGIN_MS
                expected.reschedule_strict = strict
            except Exception as exc:
                self.errors.append(f"reschedule: {exc}")


def _failover(
    group: Group,
    summary: Summary,
    term: int,
    since_ms: int,
    rejoining: Replica | None,
    timeout_s: float = 60.0,
) -> tuple[Replica, int]:
    """Wait for the first commit in a term above ``term``; record the failover from
    ``since_ms``; restart ``rejoining`` (a killed node) as a backup. Returns (new master, ms)."""
    new, first_ms = group.first_commit_after(term, timeout_s)
    if rejoining is not None:
        rejoining.process.start()
        rejoining.process.wait_ready(60)
    summary.failover_ms.append(first_ms - since_ms)
    summary.failovers += 1
    return new, first_ms - since_ms


def _kill_master(group: Group, summary: Summary) -> None:
    master = group.master()
    term = master.term()
    killed_ms = int(time.time() * 1000)
    master.process.kill()
    summary.kills += 1
    new, failover = _failover(group, summary, term, killed_ms, master)
    print(f"killed {master.name} (term {term}); {new.name} delivers after {failover} ms")


def _wait_event(replica: Replica, name: str, more_than: int, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(replica.events(name)) > more_than:
            return True
        time.sleep(0.02)
    return False


def _kill_during_takeover(group: Group, summary: Summary) -> None:
    master = group.master()
    backup = group.other(master)
    term = master.term()
    started = len(backup.events("takeover_started"))
    killed_ms = int(time.time() * 1000)
    master.process.kill()
    master.process.start()
    if not _wait_event(backup, "takeover_started", started):
        summary.problems.append(f"{backup.name} did not start a takeover")
        return
    completed = backup.is_master() and backup.term() > term
    backup.process.kill()
    summary.kills += 2
    new, failover = _failover(group, summary, term, killed_ms, backup)
    when = "after" if completed else "during"
    print(
        f"killed {master.name}, then {backup.name} {when} its takeover; {new.name} delivers "
        f"after {failover} ms"
    )


def _kill_after_a_join(group: Group, summary: Summary) -> None:
    master = group.master()
    backup = group.other(master)
    eligible = len(backup.events("replica_eligible"))
    backup.process.kill()
    backup.process.start()
    if not _wait_event(backup, "replica_eligible", eligible):
        summary.problems.append(f"{backup.name} did not stand for election after its restart")
        return
    time.sleep(1.0)
    term = master.term()
    killed_ms = int(time.time() * 1000)
    master.process.kill()
    summary.kills += 2
    new, failover = _failover(group, summary, term, killed_ms, master)
    print(
        f"{backup.name} joined 1 s before {master.name} was killed; {new.name} delivers "
        f"after {failover} ms"
    )


def _rolling_restart(group: Group, summary: Summary, interval_s: float) -> None:
    """The procedure of docs/containers.md: the backup first, its /readyz, then the master."""
    master = group.master()
    backup = group.other(master)
    for replica in (backup, master):
        term = group.master().term()
        stopped_ms = int(time.time() * 1000)
        code = replica.process.terminate()
        if code != 0:
            summary.problems.append(f"{replica.name} exited with {code} on SIGTERM")
        if replica is master:
            new, failover = _failover(group, summary, term, stopped_ms, None)
            print(f"stopped master {replica.name}; {new.name} delivers after {failover} ms")
        if replica.runtime.upgraded() != replica.runtime:
            replica.switch(replica.runtime.upgraded())
            summary.upgraded += 1
        started = time.monotonic()
        replica.start()
        if not replica.wait_readyz(180):
            summary.problems.append(f"{replica.name} not ready within 180 s of its restart")
            return
        print(f"restarted {replica.name}: ready after {time.monotonic() - started:.1f} s")
        time.sleep(interval_s)


def _mixed_versions(group: Group, summary: Summary, interval_s: float) -> None:
    """An upgrade left half done: the backup upgraded, then the master (still the earlier
    release) fails and comes back as it was, a backup of the earlier release following an
    upgraded master; then that master is killed and the earlier release delivers again."""
    master = group.master()
    backup = group.other(master)
    earlier = backup.runtime
    code = backup.process.terminate()
    if code != 0:
        summary.problems.append(f"{backup.name} exited with {code} on SIGTERM")
    backup.switch(earlier.upgraded())
    summary.upgraded += 1
    backup.start()
    if not backup.wait_readyz(180):
        summary.problems.append(f"{backup.name} not ready within 180 s of its upgrade")
        return
    time.sleep(interval_s)
    _kill_master(group, summary)  # restarted on the earlier release: it follows the upgraded
    print(f"{master.name} ({earlier}) follows the upgraded {backup.name}")
    time.sleep(interval_s)
    _kill_master(group, summary)
    print(f"the earlier release {master.name} delivers again")


def _chaos(args: argparse.Namespace, group: Group, summary: Summary, broker: Any) -> None:
    """A fault every ``--interval`` s for ``--duration`` s, drawn at random (see the module's
    docstring); each stopped replica started again at once."""
    rng = random.Random(args.seed)
    kinds = ["kill", "term", "freeze", "wipe", "master"]
    if isinstance(broker, KafkaBroker):
        kinds += ["broker", "broker-master"]
    started = time.monotonic()
    while time.monotonic() - started < args.duration:
        time.sleep(args.interval)
        kind = rng.choice(kinds)
        if kind.startswith("broker"):
            term = max(r.term() for r in group.replicas)
            broker.crash()
            time.sleep(BROKER_DOWN_S)
            broker.restart(timeout_s=120)
            summary.faults.append(kind)
            print("broker killed, started again")
            if kind == "broker":
                continue
            try:  # a retake (a new term), as an open transaction ended with the broker
                group.first_commit_after(term, timeout_s=30)
            except RuntimeError:
                pass  # the master kept its term: nothing was open when the broker died
            kind = "master"
        running = [r for r in group.replicas if r.process.running()]
        replica = group.master() if kind == "master" else rng.choice(running)
        summary.faults.append(f"{kind} {replica.name}")
        if kind == "freeze":
            replica.process.signal(signal.SIGSTOP)
            time.sleep(FREEZE_S)
            replica.process.signal(signal.SIGCONT)
        elif kind == "term":
            code = replica.process.terminate()
            if code != 0:
                summary.problems.append(f"{replica.name} exited with {code} on SIGTERM")
            replica.process.start()
        else:
            replica.process.kill()
            summary.kills += 1
            if kind == "wipe":
                shutil.rmtree(replica.data_dir, ignore_errors=True)
            replica.process.start()
        print(f"{kind} {replica.name}")
    try:
        group.master(timeout_s=120)
    except RuntimeError as exc:
        summary.problems.append(f"after the faults: {exc}")


def run_scenario(
    args: argparse.Namespace, group: Group, summary: Summary, broker: Any, seen: Collected
) -> None:
    if args.scenario == "chaos":
        _chaos(args, group, summary, broker)
    elif args.scenario == "kill":
        for _ in range(args.kills):
            time.sleep(args.interval)
            _kill_master(group, summary)
    elif args.scenario == "takeover-kill":
        for _ in range(args.kills):
            time.sleep(args.interval)
            _kill_during_takeover(group, summary)
    elif args.scenario == "join-kill":
        for _ in range(args.kills):
            time.sleep(args.interval)
            _kill_after_a_join(group, summary)
    elif args.scenario == "steady":
        time.sleep(args.duration)
    elif args.scenario == "mixed":
        time.sleep(args.interval)
        _mixed_versions(group, summary, args.interval)
    elif args.scenario == "rolling":
        for _ in range(args.kills):
            time.sleep(args.interval)
            _rolling_restart(group, summary, args.interval)
    elif args.scenario == "zombie":
        for _ in range(args.kills):
            time.sleep(args.interval)
            master = group.master()
            term = master.term()
            stopped_ms = int(time.time() * 1000)
            demoted_before = len(master.events("became_backup"))
            master.process.signal(signal.SIGSTOP)
            new, _ = _failover(group, summary, term, stopped_ms, None)
            time.sleep(2.0)  # the new master delivers while the zombie is frozen
            master.process.signal(signal.SIGCONT)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if len(master.events("became_backup")) > demoted_before:
                    break
                time.sleep(0.1)
            if len(master.events("became_backup")) > demoted_before and not master.is_master():
                summary.zombie_fenced += 1
            else:
                summary.problems.append(f"zombie {master.name} did not become a backup")
            print(f"zombie {master.name} thawed; {new.name} is master")
    elif args.scenario == "stop-all":
        time.sleep(args.interval)
        term = group.master().term()
        stopped_ms = int(time.time() * 1000)
        for replica in group.replicas:
            code = replica.process.terminate()
            if code != 0:
                summary.problems.append(f"{replica.name} exited with {code} on SIGTERM")
        print(f"stopped the whole group for {args.down} s")
        time.sleep(args.down)
        for replica in group.replicas:
            replica.process.start()
        # Both replicas first ingest what the load sent meanwhile: give them as long again.
        new, _ = _failover(group, summary, term, stopped_ms, None, 60 + args.down)
        print(f"restarted the group; {new.name} delivers again")
        time.sleep(args.interval)
    elif args.scenario == "both":
        for _ in range(args.kills):
            time.sleep(args.interval)
            term = group.master().term()
            killed_ms = int(time.time() * 1000)
            for replica in group.replicas:
                replica.process.kill()
            summary.kills += 2
            for replica in group.replicas:
                replica.process.start()
            new, _ = _failover(group, summary, term, killed_ms, None)
            print(f"killed both; {new.name} delivers again")
    elif args.scenario == "lagging":
        time.sleep(args.interval)
        master = group.master()
        backup = group.other(master)
        backup.process.kill()
        print(f"backup {backup.name} down for {args.backup_down} s")
        time.sleep(args.backup_down)
        backup.process.start()
        if not backup.process.wait_ready(300):
            summary.problems.append("the lagging backup did not catch up within 300 s")
        time.sleep(args.interval)
        _kill_master(group, summary)
    elif args.scenario == "broker-freeze":
        if broker is None:
            raise SystemExit("--scenario broker-freeze needs a broker this script starts")
        time.sleep(args.interval)
        broker.freeze()
        print(f"broker frozen for {args.freeze} s")
        time.sleep(args.freeze)
        broker.thaw()
        resumed_ms = int(time.time() * 1000)
        summary.flowing_again_after_ms = _flowing_again(resumed_ms, seen)
        time.sleep(args.interval)
    time.sleep(args.interval)


def _flowing_again(since_ms: int, seen: Collected, timeout_s: float = 120.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        first = min((d.received_ms for d in seen.every() if d.received_ms > since_ms), default=None)
        if first is not None:
            return first - since_ms
        time.sleep(0.1)
    return None


def _longest_gap(load: Load, seen: Collected) -> tuple[int, float]:
    """The longest time without a delivery becoming visible while the load ran, from a second
    after its longest delay (when deliveries flow) to its end, the window's edges included;
    and when it began (seconds into the load)."""
    begin = load.started_ms + int(load.delay_s[1] * 1000) + 1000
    times = sorted(d.received_ms for d in seen.every() if begin <= d.received_ms <= load.stopped_ms)
    if load.stopped_ms <= begin:
        return 0, 0.0
    points = [begin, *times, load.stopped_ms]
    gap, at = max((b - a, a) for a, b in zip(points, points[1:], strict=False))
    return gap, round((at - load.started_ms) / 1000, 1)


def drain(load: Load, watchers: list[DeliveryWatcher], straggle_ms: int = 5000) -> None:
    """After ``load.stop()``: wait until everything it scheduled was due (repeats' last
    occurrences included) and ``straggle_ms`` more, let the consumers read 3 s on, stop them."""
    last_due = (
        max(
            (e.due_ms if e.repeat is None else e.repeat.last_due(e.due_ms))
            for e in load.expected.values()
        )
        if load.expected
        else 0
    )
    while time.time() * 1000 < last_due + straggle_ms:
        time.sleep(0.5)
    time.sleep(3.0)
    for watcher in watchers:
        watcher.stop()


def verify(load: Load, committed: Collected, uncommitted: Collected, summary: Summary) -> None:
    lateness: list[int] = []
    committed_by_id, uncommitted_by_id = committed.by_id(), uncommitted.by_id()
    for message_id, exp in load.expected.items():
        got = committed_by_id.get(message_id, [])
        if exp.cancel_late:
            summary.cancels_acknowledged_after_due += 1
            summary.duplicates += max(0, len(got) - 1)
            continue
        if exp.cancelled:
            summary.cancelled += 1
            summary.cancelled_delivered += bool(got)
            continue
        summary.expected_deliveries += exp.times
        occurrences = [d.occurrence for d in got]
        distinct = set(occurrences)
        summary.duplicates += len(occurrences) - len(distinct)
        covered = sum(1 + d.skipped for d in got if d.occurrence in distinct)
        summary.repeat_occurrences_collapsed += sum(d.skipped for d in got)
        if exp.repeat is CRON:
            summary.cron_all_collapsed += sum(d.skipped for d in got)
        elif exp.repeat is CRON_LATEST:
            summary.cron_latest_collapsed += sum(d.skipped for d in got)
        summary.delivered += len(distinct)
        summary.lost += max(0, exp.times - covered)
        if exp.rescheduled_to is not None:
            summary.rescheduled += 1
            summary.rescheduled_moved += any(d.due_ms == exp.rescheduled_to for d in got)
            summary.rescheduled_wrong_due += sum(
                d.due_ms not in (exp.due_ms, exp.rescheduled_to) for d in got
            )
            if exp.reschedule_strict:
                summary.reschedules_strict += 1
                summary.reschedules_not_applied += any(d.due_ms != exp.rescheduled_to for d in got)
        for d in got:
            if d.produced_ms < d.due_ms or (
                exp.reschedule_strict
                and exp.rescheduled_to is not None
                and d.produced_ms < exp.rescheduled_to
            ):
                summary.early += 1
            if exp.repeat is not None and d.due_ms != exp.repeat.due_of(exp.due_ms, d.occurrence):
                summary.repeat_wrong_due += 1
            lateness.append(d.received_ms - d.due_ms)
        raw = [d.occurrence for d in uncommitted_by_id.get(message_id, [])]
        summary.uncommitted_duplicates += len(raw) - len(set(raw))
    summary.longest_gap_ms, summary.longest_gap_at_s = _longest_gap(load, committed)
    summary.scheduled = len(load.expected)
    summary.requests_per_s = round(load.achieved_rate)
    summary.repeats = sum(e.times > 1 for e in load.expected.values())
    summary.cron_repeats = sum(e.repeat in (CRON, CRON_LATEST) for e in load.expected.values())
    summary.visible_lateness_p50_ms = percentile(lateness, 0.5)
    summary.visible_lateness_p99_ms = percentile(lateness, 0.99)
    summary.visible_lateness_max_ms = max(lateness, default=0)
    if summary.failover_ms:
        summary.failover_p50_ms = percentile(summary.failover_ms, 0.5)
        summary.failover_max_ms = max(summary.failover_ms)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenario",
        choices=[
            "kill",
            "takeover-kill",
            "join-kill",
            "steady",
            "zombie",
            "both",
            "stop-all",
            "lagging",
            "broker-freeze",
            "rolling",
            "mixed",
            "chaos",
        ],
        default="kill",
        help="what happens to the group under load (see above)",
    )
    parser.add_argument(
        "--kills",
        type=int,
        default=10,
        help="how many times (all but lagging, broker-freeze); rolling: rounds",
    )
    parser.add_argument("--interval", type=float, default=12.0, help="seconds between events")
    parser.add_argument("--rate", type=int, default=2000, help="requests per second")
    parser.add_argument(
        "--cron-share",
        type=float,
        default=0.0,
        help="share of requests that are cron repeats (every 10 s in Asia/Kolkata, 3 times)",
    )
    parser.add_argument("--duration", type=float, default=600.0, help="steady, chaos: seconds")
    parser.add_argument("--replicas", type=int, default=2, help="replicas in the group")
    parser.add_argument(
        "--down", type=float, default=300.0, help="stop-all: seconds the whole group is stopped"
    )
    parser.add_argument("--backup-down", type=float, default=600.0, help="lagging: seconds")
    parser.add_argument("--freeze", type=float, default=60.0, help="broker-freeze: seconds")
    add_broker_options(parser)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--reschedule", type=float, default=0.05, help="share of one-shots rescheduled"
    )
    parser.add_argument(
        "--reschedule-max-s",
        type=float,
        default=20.0,
        help="a reschedule moves its message to 0 s up to this far ahead",
    )
    parser.add_argument(
        "--release",
        type=Path,
        default=None,
        help="an earlier release's checkout the replicas start on (rolling: upgraded to this)",
    )
    parser.add_argument(
        "--image", default=None, help="run the replicas as containers of this chronos image"
    )
    parser.add_argument(
        "--from-image",
        default=None,
        help="with --image: start on this image (rolling: upgraded to --image)",
    )
    args = parser.parse_args()
    # SIGTERM (a test's timeout) ends the run through the cleanup below: nodes and containers.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(1))
    if args.from_image and not args.image:
        parser.error("--from-image needs --image")
    if args.release and args.image:
        parser.error("--release runs processes; --image containers: one of them")
    if args.scenario == "mixed" and not (args.release or args.from_image):
        parser.error("--scenario mixed needs an earlier release: --release or --from-image")
    if args.release:
        args.release = args.release.resolve()
    runtime = Runtime(release=args.release, image=args.image, from_image=args.from_image)

    with staged(args, "failover") as stage:
        summary = Summary(scenario=args.scenario, broker=stage.broker_name)
        workdir, bootstrap, broker = stage.workdir, stage.bootstrap, stage.broker
        namespace = f"fo{uuid.uuid4().hex[:8]}"
        group = Group(workdir, bootstrap, namespace, runtime=runtime, replicas=args.replicas)
        try:
            group.start()
            settings = load_settings(group.replicas[0].config)
            topic = f"{namespace}-target"
            create_topic(settings, topic, partitions=4)
            committed, uncommitted, watchers = Watched.start(bootstrap, topic)
            with DelayClient(settings) as client:
                load = Load(
                    client,
                    topic,
                    args.rate,
                    args.seed,
                    reschedule_share=args.reschedule,
                    cron_share=args.cron_share,
                    reschedule_max_s=args.reschedule_max_s,
                    # An earlier release may not know reschedules (0.23 dead-letters them):
                    # each is then delivered at one of its two due times.
                    strict_reschedules=args.release is None and args.from_image is None,
                )
                load.start()
                try:
                    run_scenario(args, group, summary, broker, committed)
                finally:
                    load.stop()
            drain(load, watchers)
            summary.masters_at_end = sum(r.is_master() for r in group.replicas)
            if summary.masters_at_end != 1:
                summary.problems.append(f"{summary.masters_at_end} masters at the end")
            takeovers = sum(len(r.events("became_master")) for r in group.replicas) - 1
            summary.extra_takeovers = max(0, takeovers - summary.failovers)
            summary.suspicions = sum(len(r.events("suspected_master")) for r in group.replicas)
            if args.scenario == "chaos":
                summary.extra_takeovers = 0  # faults of every kind: not one takeover each
            if args.scenario == "steady" and takeovers:
                summary.problems.append(f"{takeovers} takeovers without a fault")
            if load.errors:
                print(f"load errors: {len(load.errors)}, first: {load.errors[0]}")
            verify(load, committed, uncommitted, summary)
        finally:
            for replica in group.replicas:
                try:
                    if replica.process.running():
                        replica.process.signal(signal.SIGCONT)
                        replica.process.terminate()
                except Exception as exc:  # one replica's failed stop must not leave the rest
                    print(f"stopping {replica.name}: {exc}")
                if isinstance(replica.process, ContainerNode):
                    # Whatever its client says (a signal may have ended it).
                    replica.process.remove()
    return finish(summary, stage.workdir)


if __name__ == "__main__":
    sys.exit(main())
