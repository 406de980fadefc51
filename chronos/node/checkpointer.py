"""The checkpoint worker: answers ``chronos checkpoint`` requests for the store this node owns
(a node alone's or a replica's, or a cluster member's whole database)."""

from __future__ import annotations

from pathlib import Path

import structlog

from chronos.errors import ChronosError
from chronos.lifecycle import LoopWorker
from chronos.store import checkpoint

log = structlog.get_logger(__name__)


class CheckpointWorker(LoopWorker):
    """Looks for request files every ``poll_s`` (one directory stat: no measurable idle cost).

    Parameters:
        store: the node's open store or database (only its owner can checkpoint it
            consistently).
        data_dir: the store directory, where requests arrive.
        poll_s: how often to look for requests.
        root: the only directory checkpoints may be written into (``node.checkpoint_dir``;
            None: the directory holding ``data_dir``).
    """

    def __init__(
        self,
        store: checkpoint.Checkpointable,
        data_dir: Path,
        poll_s: float = 0.5,
        root: Path | None = None,
    ) -> None:
        super().__init__("checkpoint")
        self._store = store
        self._data_dir = data_dir
        self._poll_s = poll_s
        self._root = root if root is not None else data_dir.resolve().parent

    def step(self) -> None:
        if self._stop.wait(self._poll_s):
            return
        for request in checkpoint.pending_requests(self._data_dir):
            self.answer(request)

    def answer(self, request: Path) -> None:
        """Create the requested checkpoint and write the answer file."""
        try:
            dest = checkpoint.confined(
                checkpoint.requested_dest(request), self._root, self._data_dir
            )
            result = checkpoint.create(self._store, dest)
        except (ChronosError, OSError, ValueError, KeyError) as exc:
            log.warning("checkpoint_failed", request=request.name, error=str(exc))
            checkpoint.answer_request(request, None, str(exc))
            return
        log.info(
            "checkpoint_created", path=str(dest), seek_ms=result.seek_ms, took_ms=result.took_ms
        )
        checkpoint.answer_request(request, result, None)
