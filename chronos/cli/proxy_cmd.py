"""``chronos proxy``: the HTTP front door in the foreground."""

from __future__ import annotations

import argparse

from chronos.arguments import add_config, settings_from


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("proxy", help="run the HTTP proxy (OpenAPI at /docs)")
    add_config(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    from chronos.logs import configure_logging
    from proxy.http.server import ProxyServer

    configure_logging(settings.log)
    ProxyServer(settings).serve_forever()
    return 0
