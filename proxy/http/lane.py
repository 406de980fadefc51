"""Large schedule bodies parsed, validated and encoded in child processes (issue 62).

Why: FastAPI parses a request body and validates it on the event loop, each step one C call
that holds the interpreter lock. A 16 MiB body of unknown keys held every other connection,
``/healthz`` included, for seconds; three such clients kept a plain ``POST`` waiting 3.7 s at
p99 (``scripts/edge_cost_check.py``). A thread would not help (the lock), so a body over
``proxy.inline_body_bytes`` goes to a process of ``proxy.body_workers``: it parses the JSON,
validates the model, builds and encodes every message (``DelayClient.prepare``) and sends back
the inner records; the server only checks the token's topics and limits and produces them.

Bounded: at most ``body_workers`` bodies are read at once and ``body_queue`` more wait; past
that the answer is ``503`` with ``Retry-After``. Each request may take
``proxy.request_cpu_ms`` of a worker's CPU for its messages (a cron repeat or a header costs
more than its bytes say); past it the answer is ``413``. A smaller body is read on the event
loop as before: its cost is bounded by its size.

A child answers exactly what the event loop would (the same model, the same messages: the
equivalence is a test, ``tests/integration/test_body_lane.py``), with one order changed: a
message the node would refuse (a due time, a repeat) is refused before the token's quota is
consulted, on both paths.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import pydantic
from anyio.to_thread import run_sync

from chronos.errors import NotAcknowledged, ValidationError
from chronos.logs import configure_logging
from chronos.settings import ChronosSettings
from chronos.types import EpochMs
from chronos.web.memory import TRIM_AFTER_BYTES, glibc_malloc_trim
from proxy.client import DelayClient, DelayRequest, Prepared, Receipt
from proxy.http.invalid import describe_invalid_body, unreadable_cause
from proxy.http.schemas import ScheduleIn, batch_model
from proxy.http.tenancy import to_wire

#: How much lower a body worker's CPU priority is than the server's (``nice``).
_NICE = 10


@dataclass(frozen=True)
class Refused:
    """A body the API refuses: ``status``, ``error`` and ``field`` as its answer says.

    ``after_topics``: the body's model held and a message broke a rule; the token's topic
    check (403) comes first, as on the event loop. Otherwise the body itself could not be
    read (its JSON, its model): answered before anything else.
    """

    status: int
    error: str
    field: str | None
    after_topics: bool
    topics: tuple[str, ...] = ()


@dataclass(frozen=True)
class Read:
    """A body whose every message is valid, as its worker holds it: its topics and what each
    message charges a token's limits (its deliveries, its last due time). The records stay in
    the worker, which produces them once the server's checks pass (``Reading.publish``)."""

    topics: tuple[str, ...]
    deliveries: list[int] = field(default_factory=list)
    last_dues: list[EpochMs] = field(default_factory=list)

    @classmethod
    def of(cls, prepared: Sequence[Prepared]) -> Read:
        return cls(
            tuple(p.topic for p in prepared),
            [p.deliveries for p in prepared],
            [p.last_due_ms for p in prepared],
        )


#: What the server decides for a read body, on a thread, with the way to produce its records:
#: the answer, or an exception the app's handlers answer.
Decide = Callable[["Read | Refused", Callable[[], list[Receipt]]], Any]


#: Why a body whose worker died gets 503: its records may or may not have been produced.
_WORKER_LOST = (
    "the body worker reading this request stopped; the outcome is unknown: retry with the same "
    "ids (ids make scheduling idempotent)"
)


class LaneFull(Exception):
    """Every worker is busy and the queue is full: 503, retry after ``retry_after_s``."""

    retry_after_s = 1


class OverBudget(Exception):
    """A request took more CPU than ``proxy.request_cpu_ms``: 413."""

    def __init__(self, budget_ms: int) -> None:
        super().__init__(
            f"validating the request took more than proxy.request_cpu_ms ({budget_ms} ms) of "
            "CPU: send its messages in smaller batches"
        )


class HandOver(Exception):
    """A body read on the server's side whose messages took more than
    ``proxy.inline_cpu_ms``: a body worker reads it again, from the start."""


def cpu_budget(budget_ms: int, hand_over_ms: int | None = None) -> Callable[[], None]:
    """A check that raises OverBudget once this thread spent ``budget_ms`` of CPU since the
    check was made (the thread's own time: a server's other threads do not count), or
    HandOver once it spent ``hand_over_ms``, when given and smaller."""
    started = time.thread_time()
    budget_s = budget_ms / 1000
    hand_over_s = None if hand_over_ms is None or hand_over_ms >= budget_ms else hand_over_ms / 1000

    def within() -> None:
        spent = time.thread_time() - started
        if hand_over_s is not None and spent > hand_over_s:
            raise HandOver
        if spent > budget_s:
            raise OverBudget(budget_ms)

    return within


def schedule_requests(
    messages: Sequence[ScheduleIn], settings: ChronosSettings, batch: bool
) -> list[DelayRequest]:
    """The client-library requests of a body's messages; ValidationError naming the
    message's field in a batch."""
    requests = []
    for index, message in enumerate(messages):
        try:
            requests.append(message.to_request(settings.limits))
        except ValidationError as exc:
            if not batch:
                raise
            raise ValidationError(
                f"messages[{index}].{exc.field}", exc.message, status=exc.status
            ) from exc
    return requests


def in_id_space(
    requests: Sequence[DelayRequest],
    tenant: str | None,
    settings: ChronosSettings,
    batch: bool,
    new_id: Callable[[str], str],
) -> None:
    """Give each request its id on the wire, in ``tenant``'s id space (proxy/http/tenancy.py);
    a request without one gets ``new_id``'s (``DelayClient.new_id``)."""
    for index, one in enumerate(requests):
        name = f"messages[{index}].id" if batch else "id"
        one.id = to_wire(tenant, one.id, settings.limits.max_id_bytes, name, new_id)


class BodyReader:
    """What a worker does with one body: everything but the token's checks and Kafka."""

    def __init__(self, settings: ChronosSettings) -> None:
        self._settings = settings
        self._client = DelayClient(settings)  # connects on its first publish
        self._batch = batch_model(settings.proxy.batch_max)
        #: The records of the last body read, until published or dropped.
        self.pending: list[Prepared] = []

    def read(
        self, body: bytes, content_type: str | None, batch: bool, tenant: str | None
    ) -> Read | Refused:
        """What the body's messages charge (their records kept in ``pending``), or why it
        is refused."""
        self.pending = []
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError as exc:
            invalid = {"type": "json_invalid", "loc": ("body", exc.pos), "ctx": {"error": exc.msg}}
            return Refused(*describe_invalid_body(invalid, content_type), after_topics=False)
        except (ValueError, RecursionError) as exc:
            why = unreadable_cause(exc)
            if why is None:
                return Refused(400, "There was an error parsing the body", None, False)
            return Refused(422, why, None, after_topics=False)
        try:
            if batch:
                messages = list(self._batch.model_validate(parsed, from_attributes=True).messages)
            else:
                messages = [ScheduleIn.model_validate(parsed, from_attributes=True)]
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            located = {**first, "loc": ("body", *first["loc"])}
            return Refused(*describe_invalid_body(located, content_type), after_topics=False)
        topics = tuple(m.topic for m in messages)
        try:
            self.pending = self._prepare(messages, batch, tenant)
            return Read.of(self.pending)
        except ValidationError as exc:
            return Refused(exc.status, exc.message, exc.field, True, topics)
        except UnicodeEncodeError as exc:
            error = f"the body holds text that is not UTF-8: {exc.reason}"
            return Refused(422, error, None, True, topics)
        except OverBudget as exc:
            return Refused(413, str(exc), None, True, topics)

    def _prepare(
        self, messages: Sequence[ScheduleIn], batch: bool, tenant: str | None
    ) -> list[Prepared]:
        within = cpu_budget(self._settings.proxy.request_cpu_ms)
        requests = schedule_requests(messages, self._settings, batch)
        in_id_space(requests, tenant, self._settings, batch, self._client.new_id)
        return self._client.prepare(requests, within)

    def publish(self) -> tuple[Any, ...]:
        """Produce ``pending``: ("receipts", [(id, due ms)]), or why not as the server raises
        it again (``_Worker.publish``)."""
        pending, self.pending = self.pending, []
        try:
            receipts = self._client.publish(pending)
        except NotAcknowledged as exc:
            return ("unacknowledged", str(exc))
        except ValidationError as exc:  # Kafka refused a size
            return ("refused", exc.status, exc.message, exc.field)
        return ("receipts", [(r.id, r.deliver_at_ms) for r in receipts])

    def close(self) -> None:
        self._client.close()


def serve(fd: int) -> None:
    """A body worker's life (``python -m proxy.http.body_worker``): its settings first, then
    for each body ``("read", ...)`` answered with a Read or a Refused, and after a Read
    ``("publish",)`` answered with its receipts, or ``("drop",)``; until the server closes
    the pipe."""
    # The server decides when this ends: a Ctrl-C reaches the whole process group, and the
    # server drains first (the node's decoder child does the same). SIGTERM keeps its default.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Below the server's priority: on a busy machine the CPU goes to the event loop (plain
    # requests, /healthz) and Kafka first, and a large body waits (edge_cost_check).
    os.nice(_NICE)
    with Connection(fd) as conn:
        settings: ChronosSettings = conn.recv()
        configure_logging(settings.log)
        reader = BodyReader(settings)
        trim = glibc_malloc_trim()
        size = 0
        try:
            while True:
                try:
                    kind, *args = conn.recv()
                except EOFError:
                    return
                if kind == "read":
                    size = len(args[0])
                    answer = _read(reader, *args)
                    conn.send(answer)
                    if isinstance(answer, Read):
                        continue  # its records are held until published or dropped
                elif kind == "publish":
                    conn.send(reader.publish())
                else:
                    reader.pending = []
                if size >= TRIM_AFTER_BYTES:
                    args = []  # the body, too
                    _hand_back(trim)
        finally:
            reader.close()


def _hand_back(trim: Callable[[int], int] | None) -> None:
    """Give the memory of a large body back to the system (a 16 MiB body of small values
    peaks at hundreds of MiB in a worker, which would otherwise keep them while idle)."""
    gc.collect()
    if trim is not None:
        trim(0)


def _read(reader: BodyReader, *args: Any) -> Read | Refused:
    try:
        return reader.read(*args)
    except Exception:  # a defect: told, answered as the event loop would (500)
        traceback.print_exc()
        return Refused(500, "Internal Server Error", None, after_topics=False)


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI would parse a body of ``content_type`` as JSON (and so would a worker);
    any other body is refused on the event loop, cheaply, without being parsed."""
    if not content_type:
        return False
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class _Worker:
    """One body worker process and the server's end of its pipe.

    A plain ``python -m`` child, as the node's decoder: multiprocessing's spawn would run the
    server's ``__main__`` again in it (and refuses to in a script without a main guard)."""

    def __init__(self, settings: ChronosSettings) -> None:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "proxy.http.body_worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
            )
            self._conn = Connection(ours.detach())
        # Its sections as they are: the loaded settings' own class is local to load_settings
        # and cannot be pickled.
        sections = {name: getattr(settings, name) for name in ChronosSettings.model_fields}
        self._conn.send(ChronosSettings.model_construct(**sections))

    def converse(
        self,
        body: bytes,
        content_type: str | None,
        batch: bool,
        tenant: str | None,
        decide: Decide,
    ) -> Any:
        """Have the worker read ``body`` and let ``decide`` answer it, producing its records
        through the worker if it decides so (blocking: run on a thread). EOFError or OSError
        when the worker died."""
        self._conn.send(("read", body, content_type, batch, tenant))
        read: Read | Refused = self._conn.recv()
        published = False

        def publish() -> list[Receipt]:
            nonlocal published
            published = True
            self._conn.send(("publish",))
            kind, *answer = self._conn.recv()
            if kind == "unacknowledged":
                raise NotAcknowledged(answer[0])
            if kind == "refused":
                status, message, name = answer
                raise ValidationError(name, message, status=status)
            return [Receipt(id_, due) for id_, due in answer[0]]

        try:
            return decide(read, publish)
        finally:
            if isinstance(read, Read) and not published:
                self._conn.send(("drop",))

    def alive(self) -> bool:
        return self._process.poll() is None

    def kill(self) -> None:
        """Stop it now (dead already, or its pipe broke): never waits on the event loop."""
        self._conn.close()
        self._process.kill()
        self._process.wait()

    def close(self) -> None:
        """Close its pipe (it exits on EOF); killed if it does not within 5 s."""
        self._conn.close()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class BodyLane:
    """The worker processes and their bounded queue; used from one event loop.

    At most ``body_workers`` bodies are read at once (a slot each); a worker is started when a
    slot finds none idle, and one found dead (killed, out of memory) is dropped, so no failure
    leaves the lane without workers for good."""

    def __init__(self, settings: ChronosSettings) -> None:
        proxy = settings.proxy
        self._settings = settings
        self._workers = proxy.body_workers
        self._capacity = proxy.body_workers + proxy.body_queue
        self.inline_bytes = proxy.inline_body_bytes
        self._slots: asyncio.Semaphore | None = None
        #: Started workers not reading a body now.
        self._idle: list[_Worker] = []
        self.in_flight = 0

    def takes(self, body: bytes, content_type: str | None) -> bool:
        """Whether ``body`` is read by a worker rather than on the event loop."""
        return self._workers > 0 and len(body) > self.inline_bytes and is_json(content_type)

    def start(self) -> None:
        """Start the workers now (each imports chronos in about a second, in the background:
        the first large body waits for that only if it comes sooner)."""
        while len(self._idle) < self._workers:
            self._idle.append(_Worker(self._settings))

    async def answer(
        self,
        body: bytes,
        content_type: str | None,
        batch: bool,
        tenant: str | None,
        decide: Decide,
    ) -> Any:
        """``body`` read by a worker and answered by ``decide`` (``_Worker.converse``);
        LaneFull when the workers and the queue are taken, or a worker failed."""
        if self.in_flight >= self._capacity:
            raise LaneFull(f"{self.in_flight} large bodies are being read or wait; retry")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._workers)
        self.in_flight += 1
        try:
            async with self._slots:
                worker = self._take()
                try:
                    answer = await run_sync(
                        worker.converse, body, content_type, batch, tenant, decide
                    )
                except (EOFError, OSError) as exc:
                    # It died (killed, out of memory) or its pipe broke: dropped; the next
                    # body starts another. Published or not is unknown.
                    worker.kill()
                    raise LaneFull(_WORKER_LOST) from exc
                self._idle.append(worker)
                return answer
        finally:
            self.in_flight -= 1

    def _take(self) -> _Worker:
        """An idle worker still alive, or a new one (LaneFull when none can be started)."""
        while self._idle:
            worker = self._idle.pop()
            if worker.alive():
                return worker
            worker.kill()
        try:
            return _Worker(self._settings)
        except OSError as exc:  # no descriptors, no memory, no processes left
            raise LaneFull(f"no body worker could be started ({exc}); retry") from exc

    def close(self) -> None:
        """Stop the idle workers (one reading a body stops when its pipe is closed: at the
        server's exit)."""
        idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()
