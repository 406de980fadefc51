"""``chronos dev``: the embedded local stack — broker, node and HTTP proxy in one command."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from chronos.arguments import add_config, settings_from

if TYPE_CHECKING:
    from chronos.settings import ChronosSettings

_BANNER = """
chronos dev stack is up
  Kafka (Tansu, memory-only)  {bootstrap}
  HTTP proxy                  http://{host}:{port}   (OpenAPI: /docs, /openapi.json)
  node admin API              {admin}
  node store                  {data_dir}

Schedule a message and watch it arrive:
  {env}chronos send --topic hello --value 'hi there' --delay 3s
  {env}chronos tail --topic hello --count 1
or over HTTP:
  curl -s -XPOST http://{host}:{port}/v1/messages -H 'content-type: application/json' \\
       -d '{{"topic":"hello","value":"hi there","delay_ms":3000}}'
Stop with Ctrl-C.
"""


def _admin_line(settings: ChronosSettings, port: int | None) -> str:
    if port is None:
        return "off (admin.enabled = false)"
    return f"http://{settings.admin.host}:{port}/metrics   (/healthz, /readyz)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("dev", help="run broker + node + HTTP proxy locally")
    add_config(parser)
    parser.add_argument(
        "--kafka-port", type=int, default=9092, help="port of the embedded broker (default 9092)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="node store (default: a fresh temporary directory)",
    )
    parser.add_argument("--demo", action="store_true", help="run the demo, then exit")
    parser.set_defaults(func=main)


def _kafka_configured(settings: ChronosSettings) -> bool:
    """True when the settings name a Kafka of their own: any other address than the default
    (which config/chronos.toml spells out) means "use that one, start no broker"."""
    from chronos.settings import KafkaSettings

    return settings.kafka.bootstrap_servers != KafkaSettings().bootstrap_servers


def _hint_prefix(bootstrap: str) -> str:
    """What the printed commands need in front to reach a broker off the default address."""
    from chronos.settings import KafkaSettings

    if bootstrap == KafkaSettings().bootstrap_servers:
        return ""
    return f"CHRONOS_KAFKA__BOOTSTRAP_SERVERS={bootstrap} "


def main(args: argparse.Namespace) -> int:
    from chronos.cli.demo import run_demo
    from chronos.cli.early import exit_through_cleanup
    from chronos.devstack.tansu import TansuBroker
    from chronos.logs import configure_logging
    from chronos.runtime.node import Node
    from chronos.settings import ChronosSettings
    from proxy.http.server import ProxyServer

    base = settings_from(args)
    configure_logging(base.log)
    # Until everything runs, a stop signal leaves through the finally below, which stops what
    # was started (the broker runs in a session of its own: nothing else would stop it).
    exit_through_cleanup()
    broker = None
    temporary = args.data_dir is None
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="chronos-dev-"))
    node: Node | None = None
    proxy: ProxyServer | None = None
    stop = threading.Event()
    code = 0
    try:
        if not _kafka_configured(base):
            broker = TansuBroker(port=args.kafka_port).start()
        overrides = {"node": {**base.node.model_dump(), "data_dir": data_dir}}
        if broker is not None:
            kafka = base.kafka.model_dump()
            overrides["kafka"] = {**kafka, "bootstrap_servers": broker.bootstrap}
        settings = ChronosSettings.model_validate({**base.model_dump(), **overrides})
        node = Node(settings)
        proxy = ProxyServer(settings)
        node.start()
        proxy.start()
        if not node.wait_ready(60.0):
            print("chronos: the node did not join its consumer group within 60 s", file=sys.stderr)
            return 1
        print(
            _BANNER.format(
                bootstrap=settings.kafka.bootstrap_servers,
                host=settings.proxy.host,
                port=settings.proxy.port,
                data_dir=data_dir if not temporary else f"{data_dir} (removed at exit)",
                admin=_admin_line(settings, node.admin_port),
                env=_hint_prefix(settings.kafka.bootstrap_servers),
            ),
            file=sys.stderr,
            flush=True,
        )
        if args.demo:
            code = run_demo(settings, 300, 5000)
        else:
            # Running: a stop signal ends the wait, and the finally stops everything in order.
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            while not stop.wait(1.0):
                pass
    finally:
        if proxy is not None:
            proxy.stop()
            proxy.join(10)
        if node is not None:
            node.stop()
        if broker is not None:
            broker.stop()
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)
    return code
