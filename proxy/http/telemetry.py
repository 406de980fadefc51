"""What the proxy tells its operators on ``GET /metrics`` (Prometheus text).

* ``chronos_proxy_responses_total{status}``: answers of the API (a request the guard refused
  never reaches it: see the next one);
* ``chronos_proxy_refused_total{status,reason}``: refusals of the guard (401 missing or
  unknown token, 403 operation, 408/413 body, 429 requests/s) and of the API (403 topic, 429
  max_pending or messages_per_s), also logged as ``request_refused`` (``chronos/web/refusals.py``);
* ``chronos_proxy_messages_scheduled_total``: messages Kafka acknowledged through this proxy;
* ``chronos_proxy_tokens_file_ok``: 1 while the tokens file in force is the file on disk, 0 when
  the file became unreadable, invalid or deleted and the last good tokens stay in force (a
  revocation that did not take); absent without authentication.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from chronos.web.guard import App, Message, Receive, Scope, Send
from chronos.web.refusals import Refusals
from chronos.web.tokens import TokenBook


class ProxyTelemetry(Collector):
    """The proxy's counters, and a Prometheus collector of them.

    Parameters:
        refusals: what the guard and the API refused.
    """

    def __init__(self, refusals: Refusals) -> None:
        self.refusals = refusals
        #: The tokens file in force (set once the server's guard has it); None: no auth.
        self.book: TokenBook | None = None
        self._lock = threading.Lock()
        self._statuses: Counter[int] = Counter()
        self._scheduled = 0

    def answered(self, status: int) -> None:
        with self._lock:
            self._statuses[status] += 1

    def scheduled(self, count: int) -> None:
        with self._lock:
            self._scheduled += count

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self._lock:
            statuses, scheduled = dict(self._statuses), self._scheduled
        responses = CounterMetricFamily(
            "chronos_proxy_responses", "Answers of the API by status.", labels=["status"]
        )
        for status, count in sorted(statuses.items()):
            responses.add_metric([str(status)], count)
        yield responses
        refused = CounterMetricFamily(
            "chronos_proxy_refused",
            "Requests refused by the guard or the API, by status and reason.",
            labels=["status", "reason"],
        )
        for (status, reason), count in sorted(self.refusals.counts().items()):
            refused.add_metric([str(status), reason], count)
        yield refused
        yield CounterMetricFamily(
            "chronos_proxy_messages_scheduled",
            "Messages Kafka acknowledged through this proxy.",
            value=scheduled,
        )
        if self.book is not None:
            yield GaugeMetricFamily(
                "chronos_proxy_tokens_file_ok",
                "1: the tokens in force are the file's; 0: the file cannot be used and the "
                "last good tokens stay in force.",
                value=0 if self.book.error else 1,
            )


class CountResponses:
    """ASGI middleware: tells ``telemetry`` the status of every answer."""

    def __init__(self, app: App, telemetry: ProxyTelemetry) -> None:
        self._app = app
        self._telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        telemetry = self._telemetry

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                telemetry.answered(int(message["status"]))
            await send(message)

        await self._app(scope, receive, counting)
