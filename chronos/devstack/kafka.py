"""Runs a single-node Apache Kafka broker (KRaft) from Maven Central jars as a subprocess.

Apache Kafka is what chronos' users run; Tansu (``tansu.py``) is only the zero-setup default of
``chronos dev``. Transactional isolation, message size limits and compaction behave as Kafka
specifies only here, so the tests and benchmarks that depend on them use this broker.

The jars come from Maven Central through ``kafka_pom.xml`` (``mvn dependency:copy-dependencies``)
into a cache directory, once per version: ``python -m chronos.devstack.kafka fetch``. Each broker
gets a fresh temporary log directory, formatted with Kafka's own storage tool, and is gone when
it stops.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata

from chronos.devstack.broker_process import BrokerProcess
from chronos.devstack.tansu import free_port, port_in_use
from chronos.errors import ConfigError

#: The Kafka release the tests and benchmarks run (kafka_2.13 on Maven Central).
KAFKA_VERSION = os.environ.get("CHRONOS_KAFKA_VERSION", "4.1.1")
POM = Path(__file__).with_name("kafka_pom.xml")
#: Written last into a cache directory, so a half-copied one is never taken as complete.
COMPLETE_MARKER = ".complete"
#: Heap of the broker JVM: enough for the benchmarks' rates, small beside 24 GiB and 2 cores.
DEFAULT_HEAP = "1g"

_LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = warn
logger.startup.name = kafka.server.KafkaRaftServer
logger.startup.level = info
"""


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    """Where the jars of ``version`` are kept (``CHRONOS_KAFKA_LIBS`` overrides)."""
    override = os.environ.get("CHRONOS_KAFKA_LIBS", "").strip()
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_CACHE_HOME", "") or Path.home() / ".cache")
    return base / "chronos" / f"kafka-{version}" / "libs"


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """Resolve the broker's runtime jars with Maven into :func:`cache_dir`, once; return it."""
    target = cache_dir(version)
    if (target / COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(
            "Apache Kafka's jars come from Maven Central through Maven: install maven "
            "(apt-get install maven) and a Java 17 runtime"
        )
    staging = target.with_name(f"{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(POM),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(
            f"mvn could not resolve Apache Kafka {version}:\n{done.stdout[-2000:]}{done.stderr}"
        )
    (staging / COMPLETE_MARKER).write_text(version)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def java_binary() -> str:
    """The ``java`` to run the broker with (``JAVA_HOME`` first); a clear error when absent."""
    home = os.environ.get("JAVA_HOME", "").strip()
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ConfigError("Apache Kafka needs a Java 17+ runtime on the PATH (or JAVA_HOME)")
    return found


@dataclass(frozen=True)
class Listener:
    """A client listener beside PLAINTEXT, e.g. ``Listener("SASL", "SASL_PLAINTEXT", port)``;
    its own settings go in the broker's properties as ``listener.name.<name>.*``."""

    name: str
    protocol: str
    port: int


def server_properties(
    host: str,
    port: int,
    controller_port: int,
    log_dir: Path,
    extra: dict[str, str] | None = None,
    listeners: Sequence[Listener] = (),
) -> str:
    """A single-node KRaft configuration tuned for tests: replication 1, no rebalance delay;
    ``extra`` properties added or overriding; ``listeners`` served beside PLAINTEXT."""
    more = "".join(f",{lst.name}://{host}:{lst.port}" for lst in listeners)
    protocols = "".join(f",{lst.name}:{lst.protocol}" for lst in listeners)
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}{more}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}{more}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Tests create and join groups by the hundred; Kafka's default waits 3 s per new group.
        "group.initial.rebalance.delay.ms": "0",
        # As production clusters mostly run: a topic exists only once created. Kafka's default
        # (true) creates one whenever a producer asks for it; pass it to test that.
        "auto.create.topics.enable": "false",
        **(extra or {}),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class KafkaBroker(BrokerProcess):
    """A single-node Apache Kafka broker (KRaft) in a temporary directory; gone when stopped.

    Parameters:
        port: client listener port (a free one when None); the controller takes another.
        host: listen and advertised address.
        log_path: where the broker's output goes (the temporary directory when None).
        heap: JVM heap size (``-Xmx``), e.g. ``"1g"``.
        version: Kafka release whose jars to run.
        properties: more ``server.properties`` (e.g. an authorizer), added or overriding.
        listeners: client listeners beside PLAINTEXT (SASL, TLS), each on its own port.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        heap: str = DEFAULT_HEAP,
        version: str = KAFKA_VERSION,
        properties: dict[str, str] | None = None,
        listeners: Sequence[Listener] = (),
    ) -> None:
        self.host = host
        self._properties = dict(properties or {})
        self.listeners = tuple(listeners)
        self.port = port or free_port(host)
        self._heap = heap
        self._version = version
        self._log_path = log_path
        self._workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """Bootstrap servers string for clients."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """Where the broker's output goes."""
        return self._log_path

    @property
    def data_dir(self) -> Path | None:
        """The broker's log directory (its topics' segments), None before ``start``."""
        return None if self._workdir is None else self._workdir / "data"

    def _java(self, main: str, *args: str, heap: str) -> list[str]:
        libs = fetch_jars(self._version)
        assert self._workdir is not None
        extra = os.environ.get("KAFKA_OPTS", "").split()
        # Kafka's own default collector, unless KAFKA_OPTS chooses one.
        gc = (
            []
            if any(o.startswith("-XX:+Use") and o.endswith("GC") for o in extra)
            else [
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
            ]
        )
        return [
            java_binary(),
            f"-Xms{heap}" if main == "kafka.Kafka" else "-Xms64m",
            f"-Xmx{heap}",
            *gc,
            "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true",
            # Extra JVM options, as Kafka's own scripts take them (e.g. "-Xlog:gc:file=gc.log").
            *extra,
            f"-Dlog4j2.configurationFile={self._workdir / 'log4j2.properties'}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def start(self, timeout_s: float = 60.0) -> KafkaBroker:
        """Format a fresh log directory, start the broker and wait until it answers."""
        if port_in_use(self.host, self.port):
            raise ConfigError(f"port {self.port} on {self.host} is already in use")
        controller_port = free_port(self.host)
        while controller_port == self.port:  # neither is bound yet: the OS may hand it out twice
            controller_port = free_port(self.host)
        self._workdir = Path(tempfile.mkdtemp(prefix="chronos-kafka-"))
        if self._log_path is None:
            self._log_path = self._workdir / "broker.log"
        properties = self._workdir / "server.properties"
        properties.write_text(
            server_properties(
                self.host,
                self.port,
                controller_port,
                self._workdir / "data",
                self._properties,
                self.listeners,
            )
        )
        (self._workdir / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)
        cluster_id = uuid.uuid4().hex[:22]
        formatted = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(properties),
                heap="256m",
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if formatted.returncode != 0:
            raise ConfigError(
                f"kafka storage format failed: {formatted.stderr or formatted.stdout}"
            )
        self._launch()
        with self._undone_on_failure(self.stop):
            self._wait_ready(timeout_s)
        return self

    def _launch(self) -> None:
        assert self._workdir is not None and self._log_path is not None
        properties = self._workdir / "server.properties"
        with open(self._log_path, "ab") as out:
            self._process = subprocess.Popen(
                self._java("kafka.Kafka", str(properties), heap=self._heap),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def crash(self) -> None:
        """``kill -9`` the broker, keeping its data: ``restart`` brings the same one back."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def restart(self, timeout_s: float = 60.0) -> None:
        """Start the broker again on its data and ports after ``crash`` (log recovery runs)."""
        if self._workdir is None:
            raise ConfigError("restart() needs a broker that was started and crashed")
        self._launch()
        # Its data stays: restart() again may bring it back.
        with self._undone_on_failure(lambda: self._terminate(10)):
            self._wait_ready(timeout_s, led=True)

    def _wait_ready(self, timeout_s: float, *, led: bool = False) -> None:
        """Until the broker lists itself in its metadata (registered and unfenced) and, with
        ``led``, every partition has its leader again: a restarted broker lists itself before
        it leads its partitions (measured once: 45 s without leaders after a restart, every
        client refused), and what a crash check measures from "answering" must be the broker
        serving them, not its metadata alone."""
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                output = (
                    self._log_path.read_text(errors="replace")[-3000:] if self._log_path else ""
                )
                raise ConfigError(f"Apache Kafka exited with code {code}:\n{output}")
            try:
                metadata = admin.list_topics(timeout=1.0)
            except Exception:  # not listening yet, or between two states: ask again
                metadata = None
            if metadata is not None and metadata.brokers and (not led or _all_led(metadata)):
                return
            time.sleep(0.1)
        what = "led no partitions" if led else "did not answer"
        raise ConfigError(f"Apache Kafka on {self.bootstrap} {what} within {timeout_s} s")

    def stop(self) -> None:
        """Terminate the broker and remove its data (and its log, unless placed elsewhere)."""
        self._terminate(10)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def _all_led(metadata: ClusterMetadata) -> bool:
    """Whether every partition of every topic in ``metadata`` has a leader."""
    return all(
        topic.error is None and all(p.leader >= 0 for p in topic.partitions.values())
        for topic in metadata.topics.values()
    )


def main(argv: list[str]) -> int:
    """``fetch``: resolve the jars and print their directory (used by ``.ci/run``)."""
    if argv[:1] != ["fetch"]:
        print("usage: python -m chronos.devstack.kafka fetch", file=sys.stderr)
        return 2
    try:
        print(fetch_jars())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
