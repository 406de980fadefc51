"""What every check in ``scripts/`` shares: its broker options, its work directory and broker,
the count of what a consumer saw against what was expected, and the summary it ends with.

A check is a program that hurts a running chronos (kills, freezes, full disks, bursts) and
says in one JSON line whether anything was lost, duplicated or early. Before this module each
of them parsed ``--broker``/``--bootstrap``/``--keep``, started and stopped its broker, counted
copies per id and printed its summary in its own words; now they differ only in what they do.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from chronos.devstack import BROKER_KINDS, BrokerKind
from chronos.devstack.brokers import LocalBroker, start_local_broker
from chronos.devstack.watch import Collected, DeliveryWatcher


def add_broker_options(parser: argparse.ArgumentParser, default: BrokerKind = "kafka") -> None:
    """``--broker`` (a local one this check starts), ``--bootstrap`` (an existing cluster
    instead) and ``--keep`` (a work directory to keep: logs, stores)."""
    parser.add_argument("--broker", choices=BROKER_KINDS, default=default)
    parser.add_argument("--bootstrap", default=None, help="use this cluster instead")
    parser.add_argument("--keep", default=None, help="work directory to keep (logs, stores)")


@dataclass(frozen=True)
class Stage:
    """Where a check runs: its work directory and its Kafka."""

    workdir: Path
    bootstrap: str
    #: The broker the check started (None: ``--bootstrap`` named one), to freeze or kill.
    broker: LocalBroker | None
    #: What the summary says the check ran on: ``kafka``, ``tansu`` or ``external``.
    broker_name: str


@contextmanager
def staged(args: argparse.Namespace, prefix: str, temporary: bool = False) -> Iterator[Stage]:
    """The check's work directory (``--keep``, or a fresh one under the system's temporary
    directory) and its Kafka: the one ``--bootstrap`` names, else a local ``--broker`` started
    here and stopped on the way out, whatever happened.

    ``temporary``: remove the fresh directory on the way out (a check that tests run often);
    else it stays, for its logs. A ``--keep`` directory always stays."""
    keep: str | None = getattr(args, "keep", None)
    workdir = Path(keep or tempfile.mkdtemp(prefix=f"chronos-{prefix}-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    bootstrap: str | None = getattr(args, "bootstrap", None)
    broker = None
    if bootstrap is None:
        broker = start_local_broker(args.broker, workdir / "broker.log")
        bootstrap = broker.bootstrap
    name = "external" if broker is None else str(args.broker)
    try:
        yield Stage(workdir, bootstrap, broker, name)
    finally:
        if broker is not None:
            broker.stop()
        if temporary and not keep:
            shutil.rmtree(workdir, ignore_errors=True)


class Watched(NamedTuple):
    """A target topic read from its start twice: ``committed`` as a ``read_committed`` consumer
    sees it (what a check judges), ``uncommitted`` as a ``read_uncommitted`` one (the Java
    consumer's default: a check reports the duplicates aborted transactions leave there). A
    tuple, so a check unpacks it: ``committed, uncommitted, watchers = Watched.start(...)``."""

    committed: Collected
    uncommitted: Collected
    watchers: list[DeliveryWatcher]

    @classmethod
    def start(cls, bootstrap: str, topic: str) -> Watched:
        committed, uncommitted = Collected(), Collected()
        watchers = [
            DeliveryWatcher(bootstrap, [topic], committed.add).start(),
            DeliveryWatcher(bootstrap, [topic], uncommitted.add, "read_uncommitted").start(),
        ]
        return cls(committed, uncommitted, watchers)


@dataclass(kw_only=True)
class Tally:
    """What a consumer saw of the messages a check expected. A summary that counts deliveries
    extends it, so every check says lost, duplicates and early alike."""

    lost: int = 0
    duplicates: int = 0
    early: int = 0

    @property
    def exact(self) -> bool:
        """Each expected message delivered once, none before its due time."""
        return not (self.lost or self.duplicates or self.early)

    def count(self, expected: Mapping[str, int], seen: Collected) -> list[int]:
        """Count each expected id's copies in ``seen`` (``expected``: id -> due time, epoch
        ms); returns the lateness of each delivered message's first copy, in ms."""
        lateness = []
        for message_id, due_ms in expected.items():
            got = seen.copies(message_id)
            if not got:
                self.lost += 1
                continue
            self.duplicates += len(got) - 1
            self.early += sum(d.produced_ms < due_ms for d in got)
            lateness.append(got[0].produced_ms - due_ms)
        return lateness


class Summary(Protocol):
    """A check's summary: a dataclass whose ``ok`` says whether the check passed."""

    @property
    def ok(self) -> bool: ...


def finish(summary: Summary | Mapping[str, object], workdir: Path | None = None) -> int:
    """Print where the logs are and the summary as one JSON line (last, for machines); the
    exit status: 0 when the summary is ``ok``, 1 otherwise.

    ``summary``: a dataclass with an ``ok`` property, or a JSON object with an ``ok`` key."""
    if isinstance(summary, Mapping):
        body: dict[str, Any] = dict(summary)
    elif is_dataclass(summary) and not isinstance(summary, type):
        body = asdict(summary) | {"ok": summary.ok}
    else:
        raise TypeError(f"a check's summary is a dataclass or a mapping, not {type(summary)}")
    if workdir is not None:
        print(f"logs: {workdir}")
    print(json.dumps(body, default=str))
    return 0 if body.get("ok") else 1
