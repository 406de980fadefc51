"""An inner reader in a child process, so decoding runs beside the node's GIL, not under it.

Why: the node's threads share one GIL, and ingest gives way first. Consuming, decoding,
validating and encoding were ~45 % of ingest's GIL time (py-spy, 32,500 msg/s); in a child
they cost the node only unpickling its batches (~0.1 us per record). The child holds no
state that matters: the store keeps the offsets, so a child that dies is replaced and reads
again from there (see ``IngestWorker``).

The parent talks to the child over one pipe. Child to parent: ``("opened", end offsets)``
once, then ``("batch", DecodedBatch)`` per read that found records (or, while catching up,
positions), or ``("failed", reason)`` before it exits. Parent to child: ``("commit", offsets)`` and
``("stop", None)``.

In the parent a receiver thread takes each batch off the pipe as it comes and tells
``on_read`` (the ingest watermark: a batch without a cancel counts for the cancel gate as soon
as it is read, ``node/watermark.py``), then queues it for the ingest thread, whose store write
of the batch before would otherwise hold it. The queue is bounded: a full one stops the
receiver, a full pipe then the child, so the parent's pace is still the child's.
"""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import structlog

from chronos.clock import SystemClock
from chronos.logs import configure_logging
from chronos.node.inner_reader import DecodedBatch, InnerReader, ReaderSpec
from chronos.node.interpreter import tune_interpreter
from chronos.settings import LogSettings
from chronos.threadname import name_this_thread

log = structlog.get_logger(__name__)

_STOP_TIMEOUT_S = 10.0
#: Batches received and not yet taken by the ingest thread (each up to ``batch_max`` records).
_INBOX_BATCHES = 8
#: How often a receiver blocked on a full inbox looks whether the source is closing.
_INBOX_WAIT_S = 0.1


class DecoderProcess:
    """A ``BatchSource`` whose reader runs in a child process.

    Parameters:
        name: process name (the ingest thread's, for logs and ``ps``).
        spec: the reader to run.
        log_settings: the node's logging, repeated in the child.
        start_timeout_s: how long the child may take to start and open its consumer.
        on_read: told each batch as it arrives, on the receiver thread, before the ingest
            thread gets it.
    """

    def __init__(
        self,
        name: str,
        spec: ReaderSpec,
        log_settings: LogSettings,
        start_timeout_s: float = 60.0,
        on_read: Callable[[DecodedBatch], None] | None = None,
    ) -> None:
        self._name = name
        self._spec = spec
        self._log_settings = log_settings
        self._start_timeout_s = start_timeout_s
        self._on_read = on_read
        self._conn: Connection | None = None
        self._process: subprocess.Popen[bytes] | None = None
        #: A batch received but not returned yet: merged, it would have overfilled a write.
        self._held: DecodedBatch | None = None
        #: What the receiver thread took off the pipe: ("batch", batch), or the reason the
        #: child is gone as ("failed", reason).
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue(_INBOX_BATCHES)
        self._receiver: threading.Thread | None = None
        self._closing = threading.Event()

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return None if self._process is None else self._process.pid

    def open(self, start: dict[int, int]) -> dict[int, int]:
        # A plain ``python -m`` child, not multiprocessing's spawn: that would import the node's
        # __main__ (the whole CLI) again in the child, 19 MiB and 0.2 s more for nothing.
        ours, theirs = socket.socketpair()
        with ours, theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), self._name],
                pass_fds=[theirs.fileno()],
            )
            parent = Connection(ours.detach())
        # Our copy of the child's end is closed: EOF here once the child exits.
        self._conn, self._process = parent, process
        try:
            parent.send((self._spec, start, self._log_settings))
            if not parent.poll(self._start_timeout_s):
                raise RuntimeError(f"decoder process did not start in {self._start_timeout_s} s")
            targets: dict[int, int] = self._receive("opened")
        except BaseException:
            self.close()  # a failed open is retried: one child per try would pile up
            raise
        # Each opening has its own inbox and closing flag: a receiver of an earlier child that
        # outlived its close never writes into this one's.
        self._closing = threading.Event()
        self._inbox = queue.Queue(_INBOX_BATCHES)
        self._receiver = threading.Thread(
            target=self._receive_batches,
            args=(parent, self._inbox, self._closing),
            name=f"{self._name}-rx",
            daemon=True,
        )
        self._receiver.start()
        return targets

    def _receive_batches(
        self, conn: Connection, inbox: queue.Queue[tuple[str, Any]], closing: threading.Event
    ) -> None:
        """The receiver thread: every batch off the pipe, told to ``on_read``, into the inbox,
        until the child is gone (EOF after a stop, or its failure). Whatever ends it reaches
        the ingest thread as a failure, which restarts the source."""
        name_this_thread("decoder-rx")
        try:
            while True:
                kind, payload = conn.recv()
                if closing.is_set():
                    continue  # drained until the child exits: it is read again on restart
                if kind == "batch" and self._on_read is not None:
                    self._on_read(payload)
                _deliver(inbox, closing, (kind, payload))
                if kind == "failed":
                    return
        except (EOFError, OSError):
            _deliver(inbox, closing, ("failed", "exited"))
        except BaseException as exc:  # an unreadable batch, a failing on_read: never silent
            _deliver(inbox, closing, ("failed", f"receiver: {type(exc).__name__}: {exc}"))

    def read(self, timeout_s: float) -> DecodedBatch:
        """The next batch, with those already received merged in while they fit in the batch
        size: the child sends small batches when it is ahead, and each batch costs the writer
        a store write and a wake-up of the push worker, under the node's GIL."""
        self._opened()
        batch, self._held = self._held, None
        if batch is None:
            try:
                batch = self._batch(self._inbox.get(timeout=timeout_s))
            except queue.Empty:
                return DecodedBatch()
        while True:
            try:
                later = self._batch(self._inbox.get_nowait())
            except queue.Empty:
                break
            if len(batch.items) + len(later.items) > self._spec.batch_max:
                self._held = later  # the next read starts with it
                break
            batch.merge(later)
        return batch

    def _batch(self, item: tuple[str, Any]) -> DecodedBatch:
        kind, payload = item
        if kind == "failed":
            raise RuntimeError(
                f"decoder process {self._name} exited"
                if payload == "exited"
                else f"decoder process {self._name} failed: {payload}"
            )
        if kind != "batch":
            raise RuntimeError(f"decoder process {self._name} sent {kind!r}, not 'batch'")
        batch: DecodedBatch = payload
        return batch

    def store_offsets(self, offsets: dict[int, int]) -> None:
        self._opened().send(("commit", offsets))

    def close(self) -> None:
        """Ask the child to stop, dropping what it still sends (it is read again on restart)."""
        conn, process, receiver = self._conn, self._process, self._receiver
        self._conn = self._process = self._held = self._receiver = None
        if conn is None or process is None:
            return
        self._closing.set()  # the receiver drops the rest and no longer waits on the inbox
        try:
            conn.send(("stop", None))
            if receiver is not None:
                # It reads what the child still sends until the child exits (EOF): a child
                # blocked sending a batch only sees the stop once that batch is read.
                receiver.join(_STOP_TIMEOUT_S)
            else:
                while process.poll() is None and conn.poll(_STOP_TIMEOUT_S):
                    conn.recv()
        except (EOFError, OSError):
            pass  # the child is gone already
        finally:
            try:
                process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("decoder_process_killed", process=self._name)
                process.kill()
                process.wait()
            conn.close()

    def _receive(self, expected: str) -> Any:
        try:
            kind, payload = self._opened().recv()
        except (EOFError, OSError) as exc:
            raise RuntimeError(f"decoder process {self._name} exited") from exc
        if kind == "failed":
            raise RuntimeError(f"decoder process {self._name} failed: {payload}")
        if kind != expected:
            raise RuntimeError(f"decoder process {self._name} sent {kind!r}, not {expected!r}")
        return payload

    def _opened(self) -> Connection:
        if self._conn is None:
            raise RuntimeError("decoder process used before open()")
        return self._conn


def _deliver(
    inbox: queue.Queue[tuple[str, Any]], closing: threading.Event, item: tuple[str, Any]
) -> None:
    """Queue ``item`` for the ingest thread, unless the source closes meanwhile."""
    while not closing.is_set():
        try:
            inbox.put(item, timeout=_INBOX_WAIT_S)
            return
        except queue.Full:
            continue


def _child_main(conn: Connection) -> None:
    """The child: read, decode and send batches until told to stop or the parent is gone."""
    # The parent decides when this ends: a Ctrl-C reaches the whole process group, and the node
    # drains first. SIGTERM keeps its default, for whoever stops the whole group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        spec, start, log_settings = conn.recv()
    except (EOFError, OSError):
        return
    configure_logging(log_settings)
    name_this_thread("decoder")
    reader = InnerReader(spec, SystemClock().now_ms)  # a child cannot share the node's clock
    try:
        conn.send(("opened", reader.open(start)))
        # The collector, at CPython's defaults, cost this process a sixth of its CPU (decoding
        # allocates several objects per record): the node's settings apply here too.
        tune_interpreter()
        told: dict[int, int] = {}
        while True:
            # Also how a dead parent is noticed: its end of the pipe reads as EOF.
            while conn.poll(0):
                kind, payload = conn.recv()
                if kind == "stop":
                    return
                reader.store_offsets(payload)
            batch = reader.read(spec.poll_timeout_s)
            # An idle read says something new only when a position moved (past a marker).
            if not batch.empty or batch.positions != told:
                told = batch.positions if batch.empty else {}
                conn.send(("batch", batch))
    except (EOFError, OSError):
        return  # the parent is gone: nobody left to read for
    except Exception as exc:
        log.exception("decoder_process_failed", partitions=spec.partitions)
        try:
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        reader.close()


if __name__ == "__main__":
    # argv: the inherited socket's descriptor, then the name (for ps and logs only).
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        sys.exit("chronos.node.decoder_process is started by a chronos node, not by hand")
    _child_main(Connection(int(sys.argv[1])))
