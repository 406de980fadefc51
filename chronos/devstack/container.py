"""A `chronos run` node as a Docker container, driven like ``process.NodeProcess``.

The checks that hurt a group (``scripts/failover_check.py``) run the replicas as processes or,
to test the deployment users run, as containers of the chronos image: the same start, kill,
freeze and graceful stop, here ``docker run``/``kill``/``pause``/``stop``. Host networking, so
the broker's advertised loopback address and each node's admin port mean the same inside and
out. The store lives on a named volume that outlives the container (a restart or an upgrade
keeps it); ``image`` may change between runs (a rolling upgrade).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from chronos.devstack.process import READY_EVENT, NodeProcess

#: Where the node's settings file is mounted inside the container.
CONFIG_PATH = "/etc/chronos/node.toml"
#: The image's data volume (``docker/Dockerfile``).
DATA_PATH = "/var/lib/chronos"


def _docker(*args: str, timeout_s: float = 120.0) -> None:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")


class ContainerNode(NodeProcess):
    """A node container whose output goes to ``log_path`` (appended across restarts). Its
    attached ``docker run`` client stands for the child process of ``NodeProcess``, whose
    ready-event watch and liveness it keeps; start, kill, freeze and stop go through Docker.

    Parameters:
        name: the container's name (and its volume's, with ``-data``).
        image: the chronos image to run; may be changed before a ``start``.
        config: the node's TOML settings file on this machine (its ``data_dir`` must lie
            under ``DATA_PATH``).
        log_path: where the container's stdout and stderr go.
        ready_event: the log event ``wait_ready`` waits for.
        env: environment of the container (``CHRONOS_*`` settings override the file's).
        unset_env: variables of the image's environment to remove (an earlier release's
            settings refuse a variable naming a section it does not know, such as the admin
            port today's Dockerfile sets).
    """

    def __init__(
        self,
        *,
        name: str,
        image: str,
        config: Path,
        log_path: Path,
        ready_event: str = READY_EVENT,
        env: dict[str, str] | None = None,
        unset_env: tuple[str, ...] = (),
    ) -> None:
        super().__init__(config, log_path, ready_event)
        self.name = name
        self.image = image
        self.env = env or {}
        self.unset_env = unset_env
        self.volume = f"{name}-data"

    def start(self) -> None:
        """``docker run`` attached (its output is the log); ``started_at`` as NodeProcess."""
        self._ready_seen = self._count_ready()
        self.started_at = time.time()
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(  # its own session: a terminal's ^C is ours
                [
                    "docker",
                    "run",
                    "--rm",
                    "--name",
                    self.name,
                    "--network",
                    "host",
                    "--volume",
                    f"{self.volume}:{DATA_PATH}",
                    "--volume",
                    f"{self._config.resolve()}:{CONFIG_PATH}:ro",
                    "--sig-proxy=false",
                    *(f"--env={key}={value}" for key, value in self.env.items()),
                    *(["--entrypoint", "env"] if self.unset_env else []),
                    self.image,
                    *(arg for name in self.unset_env for arg in ("-u", name)),
                    *(["chronos"] if self.unset_env else []),
                    "run",
                    "--config",
                    CONFIG_PATH,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """``docker kill``: SIGKILL to the node, no chance to flush anything."""
        assert self._process is not None
        _docker("kill", self.name)
        self._process.wait(60)

    def signal(self, signum: int) -> None:
        """SIGSTOP/SIGCONT as ``docker pause``/``unpause`` (the cgroup freezer)."""
        if signum == signal.SIGSTOP:
            _docker("pause", self.name)
        elif signum == signal.SIGCONT:
            if self.running():
                subprocess.run(["docker", "unpause", self.name], capture_output=True, timeout=60)
        else:
            _docker("kill", "--signal", signal.Signals(signum).name, self.name)

    def terminate(self, timeout_s: float = 60.0) -> int:
        """``docker stop`` (SIGTERM, SIGKILL after ``timeout_s``); the node's exit code."""
        assert self._process is not None
        _docker("stop", "--time", str(int(timeout_s)), self.name, timeout_s=timeout_s + 30)
        return self._process.wait(timeout_s)

    def remove(self) -> None:
        """Remove the container, running or not, and its store: the end of a check (its
        attached client may be gone while the container still runs)."""
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True, timeout=120)
        subprocess.run(["docker", "volume", "rm", "-f", self.volume], capture_output=True)
