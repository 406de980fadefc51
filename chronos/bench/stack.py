"""The system under test: a broker (a local one unless given) and a chronos node process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from chronos.bench.host import dir_bytes
from chronos.devstack.brokers import BrokerKind, LocalBroker, start_local_broker
from chronos.devstack.process import READY_EVENT, NodeProcess
from chronos.kafka.admin import create_topic, ensure_topics
from chronos.settings import ChronosSettings, TopicSettings, load_settings


@dataclass(frozen=True)
class TopicLayout:
    """Partitions of a scenario's topics.

    The inner topic's count is a chronos setting (``topics.inner_partitions``); the target
    topic's is its owner's choice. Both decide how many records share a Kafka batch, which
    is what the broker's CPU follows (see docs/benchmarks/README.md, round 5).
    """

    inner: int = field(default_factory=lambda: TopicSettings().inner_partitions)
    target: int = 8

    def __post_init__(self) -> None:
        if self.inner < 1 or self.target < 1:
            raise ValueError(
                f"partitions must be at least 1 (inner {self.inner}, target {self.target})"
            )

    def as_result(self) -> dict[str, int]:
        """How a scenario's result records the layout it ran with."""
        return {"inner_partitions": self.inner, "target_partitions": self.target}


class BenchStack:
    """A fresh namespace, store and node for one scenario.

    Parameters:
        bootstrap: an existing Kafka, or None to run a local broker of ``broker``'s kind.
        node_settings: extra ``[node]`` TOML lines (e.g. thread counts).
        layout: partitions of the inner topic and of the target topic.
        broker: the local broker to start when no bootstrap is given.
        replicas: 0 for a node alone; N for a replica group of N node processes (the first
            started is the master: ``node``; the others are ``backups``).
        node_command: the ``chronos`` command of the nodes (another revision's,
            ``bench/revision.py``); None: this interpreter's.
        namespace: the topic namespace (a check that names topics in ``node_settings`` picks
            it); None: a fresh one.
    """

    def __init__(
        self,
        *,
        bootstrap: str | None,
        node_settings: str = "",
        layout: TopicLayout | None = None,
        broker: BrokerKind = "tansu",
        replicas: int = 0,
        node_command: Sequence[str] | None = None,
        namespace: str | None = None,
    ) -> None:
        self._node_command = node_command
        self._replicas = replicas
        self.backups: list[NodeProcess] = []
        self._given = bootstrap
        self._kind: BrokerKind = broker
        self._broker: LocalBroker | None = None
        self._node_settings = node_settings
        self.layout = layout or TopicLayout()
        self.workdir = Path(tempfile.mkdtemp(prefix="chronos-bench-"))
        self.namespace = namespace or f"bench{uuid.uuid4().hex[:8]}"
        self.target = f"{self.namespace}-target"

    @property
    def bootstrap(self) -> str:
        if self._given:
            return self._given
        assert self._broker is not None
        return self._broker.bootstrap

    def __enter__(self) -> BenchStack:
        """Start the broker (unless given) and create the topics; a failure on the way stops
        what was started (the broker runs in a session of its own: nothing else would)."""
        try:
            return self._enter()
        except BaseException:
            self._close(kept=True)
            raise

    def _enter(self) -> BenchStack:
        if not self._given:
            self._broker = start_local_broker(self._kind, self.workdir / f"{self._kind}.log")
        configs = [self._config(r) for r in range(max(1, self._replicas))]
        self.settings: ChronosSettings = load_settings(configs[0])
        ensure_topics(self.settings)
        create_topic(self.settings, self.target, self.layout.target)
        if not self._replicas:
            self.node = self._process(configs[0], "node.log")
            return self
        self.node = self._process(configs[0], "node.log", "became_master")
        self.backups = [
            self._process(c, f"backup-{n}.log", "ingest_caught_up")
            for n, c in enumerate(configs[1:])
        ]
        return self

    def new_replica(self, index: int, ready: str = "replica_eligible") -> NodeProcess:
        """One more replica of the group (not started), with a store of its own that is empty
        until it runs: a replaced disk, or a machine added to the group."""
        assert self._replicas, "a node alone has no group to join"
        return self._process(self._config(index), f"replica-{index}.log", ready)

    def _process(self, config: Path, log: str, ready: str = READY_EVENT) -> NodeProcess:
        return NodeProcess(config, self.workdir / log, ready, command=self._node_command)

    def _config(self, replica: int) -> Path:
        """The TOML of one node; a replica of group ``bench`` when the stack has replicas."""
        # The first node's file is chronos.toml: the proxy scenario extends it.
        path = self.workdir / ("chronos.toml" if replica == 0 else f"chronos-{replica}.toml")
        store = self.workdir / ("store" if replica == 0 else f"store-{replica}")
        group = '[group]\nname = "bench"\n' if self._replicas else ""
        path.write_text(
            f'[kafka]\nbootstrap_servers = "{self.bootstrap}"\n'
            f'[topics]\nnamespace = "{self.namespace}"\ninner_partitions = {self.layout.inner}\n'
            f'[node]\nnode_id = "n{replica}"\ndata_dir = "{store}"\n{self._node_settings}\n'
            f'{group}[log]\nformat = "json"\n'
        )
        return path

    def start_proxy(
        self,
        port: int,
        stdout: IO[bytes] | int = subprocess.DEVNULL,
        preexec_fn: Callable[[], None] | None = None,
    ) -> subprocess.Popen[bytes]:
        """``chronos proxy`` on ``port`` with the first node's configuration (not yet
        answering: see ``wait_http``); the caller terminates it."""
        config = self.workdir / "proxy.toml"
        node = (self.workdir / "chronos.toml").read_text()
        config.write_text(node + f"\n[proxy]\nport = {port}\n")
        return subprocess.Popen(
            [sys.executable, "-m", "chronos.cli.entry", "proxy", "--config", str(config)],
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout != subprocess.DEVNULL else subprocess.DEVNULL,
            preexec_fn=preexec_fn,
        )

    def start_node(self) -> None:
        self.node.start()
        if not self.node.wait_ready(120):
            raise RuntimeError(f"node not ready, see {self.workdir / 'node.log'}")
        for backup in self.backups:
            backup.start()
            if not backup.wait_ready(120):
                raise RuntimeError(f"backup not ready, see {self.workdir}")

    @property
    def broker(self) -> LocalBroker | None:
        """The local broker this stack started, None for a given cluster."""
        return self._broker

    @property
    def broker_pid(self) -> int | None:
        """The local broker's process id, None for a given cluster."""
        return None if self._broker is None else self._broker.pid

    @property
    def inner_topic(self) -> str:
        return self.settings.topics.names.inner

    def store_bytes(self) -> int:
        """Bytes the node's store occupies on disk."""
        return dir_bytes(self.workdir / "store")

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        self._close(kept=exc_type is not None)

    def _close(self, kept: bool) -> None:
        """Stop every node and the broker; remove the work directory unless ``kept`` (a
        failure's logs)."""
        nodes = [*self.backups, self.node] if hasattr(self, "node") else self.backups
        for node in nodes:
            try:
                node.terminate()
            except (AssertionError, OSError):
                pass
        broker, self._broker = self._broker, None
        if broker is not None:
            broker.stop()
        if not kept:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True)
class Rig:
    """Where a scenario's stacks run, and where it says what they did: the same for every
    scenario of one ``chronos bench`` run.

    Parameters:
        bootstrap: an existing cluster, or None for a broker each stack starts.
        log: where each run's line goes.
        layout: the topics' partitions.
        broker: the broker a stack starts when ``bootstrap`` is None.
    """

    bootstrap: str | None
    log: Callable[[str], None]
    layout: TopicLayout | None = None
    broker: BrokerKind = "tansu"

    def stack(self, replicas: int = 0) -> BenchStack:
        """A fresh stack (its own topics, node and, without ``bootstrap``, broker)."""
        return BenchStack(
            bootstrap=self.bootstrap, layout=self.layout, broker=self.broker, replicas=replicas
        )
