"""A cron repeat's occurrences are the same wherever they are computed (issue 63, "the same
due time everywhere"): the proxy's receipt, the master that delivers the first ones, a backup
that takes over, a replica restarted from its own store that takes over again, and a node
alone restarted mid-repeat. Every process computes occurrence k from what was acknowledged
(expression, zone, first due, ``times``) and the tz database alone, so each delivered
``chronos-due-ms`` must equal the brute-force reference's k-th fire (``test_cron_vixie``'s
field rules, not chronos' or croniter's), exactly once, never early.

Each step waits for an event (an occurrence delivered, a master elected), never for a fixed
time; how late a failover makes an occurrence is the benchmarks' business, not this test's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from chronos.repeat import Repeat
from proxy.client import DelayClient
from tests.integration.harness import Group, Inbox, make_settings, running_node, wait_until
from tests.unit.test_cron_vixie import reference_match

#: (expression, zone, times): fires every 2 and 3 s. A failover (about 2 s) delays an
#: occurrence or two; the catch-up window (600 s) delivers each of them, none collapsed.
REPEATS = [
    ("*/2 * * * * *", "Asia/Kolkata", 7),
    ("1-59/3 * * * * *", "America/New_York", 5),
]


def reference_occurrences(expression: str, zone: str, start_ms: int, times: int) -> list[int]:
    """The first ``times`` fires at or after ``start_ms`` (ms), second by second."""
    tz = ZoneInfo(zone)
    moment = datetime.fromtimestamp(-(-start_ms // 1000), UTC)
    fires: list[int] = []
    while len(fires) < times:
        if reference_match(expression, moment.astimezone(tz).replace(tzinfo=None)):
            fires.append(int(moment.timestamp()) * 1000)
        moment += timedelta(seconds=1)
    return fires


def _schedule(client: DelayClient, topic: str, prefix: str) -> dict[str, list[int]]:
    """Each repeat sent 2 s ahead; its expected occurrences by id, the receipt's first due
    time checked against the reference's first."""
    expected: dict[str, list[int]] = {}
    for n, (expression, zone, times) in enumerate(REPEATS):
        message_id = f"{prefix}{n}"
        requested = client.send_delay(
            topic,
            b"tick",
            id=message_id,
            delay=2,
            repeat=Repeat.calendar(expression, zone, times=times),
        )
        start = requested.deliver_at_ms
        fires = reference_occurrences(expression, zone, start, times)
        assert fires[0] == start, (message_id, "the receipt's due time is not the first fire")
        expected[message_id] = fires
    return expected


def _verify(inbox: Inbox, expected: dict[str, list[int]]) -> None:
    """Each occurrence once, at the reference's due time, never early."""
    wrong: dict[str, object] = {}
    for message_id, fires in expected.items():
        got = [(d.occurrence, d.due_ms, d.skipped) for d in inbox.occurrences(message_id)]
        late = [d.produced_ms - d.due_ms for d in inbox.occurrences(message_id)]
        want = [(k, due, 0) for k, due in enumerate(fires, start=1)]
        print(message_id, "lateness ms by occurrence:", late)  # shown with -rP
        if got != want or min(late) < 0:
            wrong[message_id] = {"expected": want, "got": got, "lateness_ms": late}
    assert not wrong, f"occurrences differ from the reference: {wrong}"


@pytest.mark.kafka_only(
    reason="exactly once for read_committed consumers needs aborted records hidden"
)
@pytest.mark.timeout(300)
def test_cron_occurrences_hold_across_two_failovers_and_a_restart(
    group: Group, namespace: str
) -> None:
    """a delivers occurrences 1-2, b (which computed nothing but ingested the request) takes
    over and delivers on, a restarts from its store as a backup, b stops, a delivers the
    rest: every occurrence equals the reference's."""
    a = group.start("a")
    wait_until(lambda: group.masters() == ["a"], 60, "a is master")
    b = group.start("b")
    topic = f"{namespace}-cron"
    with Inbox(a.settings, [topic]) as inbox, DelayClient(a.settings) as client:
        expected = _schedule(client, topic, "g-")
        for message_id in expected:
            inbox.wait_occurrence(message_id, 2, 60)
        a.stop()
        wait_until(lambda: group.masters() == ["b"], 60, "b took over")
        for message_id in expected:
            inbox.wait_occurrence(message_id, 4, 60)
        group.start("a")  # the same store: a restarted replica
        b.stop()
        wait_until(lambda: group.masters() == ["a"], 90, "a took over again")
        for message_id, fires in expected.items():
            inbox.wait_occurrence(message_id, len(fires), 90)
        # An occurrence too many would come before markers due after the last one.
        last = max(fires[-1] for fires in expected.values())
        inbox.settle(client, topic, 4, deliver_at_ms=last + 4_000)
        _verify(inbox, expected)


def test_cron_occurrences_hold_across_a_node_alone_s_restart(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """A node alone stopped after occurrence 2 and started again from its store delivers
    the rest at the reference's due times (at least once: a restart may deliver again an
    occurrence whose acknowledgement it had not recorded, so duplicates are allowed here,
    never a wrong or missing due time)."""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-cron"
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        with running_node(settings):
            expected = _schedule(client, topic, "n-")
            for message_id in expected:
                inbox.wait_occurrence(message_id, 2, 60)
        with running_node(settings):
            for message_id, fires in expected.items():
                inbox.wait_occurrence(message_id, len(fires), 90)
            last = max(fires[-1] for fires in expected.values())
            inbox.settle(client, topic, 4, deliver_at_ms=last + 4_000)
        for message_id, fires in expected.items():
            seen = {(d.occurrence, d.due_ms) for d in inbox.occurrences(message_id)}
            want = set(enumerate(fires, start=1))
            assert seen == want, (message_id, sorted(seen), sorted(want))
            assert all(d.produced_ms >= d.due_ms for d in inbox.occurrences(message_id))
