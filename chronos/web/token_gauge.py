"""The tokens file's state as a Prometheus gauge, for the node's admin API (the proxy has
its own in ``proxy/http/telemetry.py``). Apart from ``tokens.py``, which ``chronos token``
imports without the metrics library."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from chronos.web.tokens import TokenBook


class TokensFileGauge:
    """A Prometheus collector of one gauge, ``name``: 1 while the tokens in force are the
    file's, 0 while the file cannot be used and the last good tokens stay in force (a
    revocation that did not take, an emptied file); absent without a tokens file.

    ``book`` is set once the server built it (after its application, which takes this)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.book: TokenBook | None = None

    def collect(self) -> Iterator[Metric]:
        book = self.book
        if book is not None:
            yield GaugeMetricFamily(
                self.name,
                "1: the tokens in force are the file's; 0: the file cannot be used and the "
                "last good tokens stay in force.",
                value=0 if book.error else 1,
            )
