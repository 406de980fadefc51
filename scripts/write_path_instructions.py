"""Instructions per message of the write path (decode, the trip to the main process, the store
write), counted by valgrind for two revisions: a comparison that holds on a noisy machine.

On the 2 shared cores of a development machine, CPU time per message moves by ±30 % between
runs of the same code, more than most changes to the write path cost. Instruction counts
(callgrind's ``Ir``) are the same from run to run, so a few percent shows. They are not time:
a cache miss costs more than an instruction, so the end-to-end guard (``chronos bench --only
steady``) still says what a user gets.

    python scripts/write_path_instructions.py --baseline 6214583 --candidate HEAD [--messages 10000]

Each phase runs in a fresh interpreter under ``valgrind --tool=callgrind``: ``setup`` builds N
inner records, ``decode`` also decodes them (``decode_batch``, batches of 2,000), ``pickle``
also pickles and unpickles each batch's items (what a decoder child and the node pay),
``apply`` also writes them (``Ledger.apply_decoded``). A phase's cost is its count minus the
one before it. Needs valgrind (Debian: ``apt-get install valgrind``) and git.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("setup", "decode", "pickle", "apply")

#: The workload, run by each revision's own code (so it uses only APIs both sides have).
WORKLOAD = r"""
import pickle, sys, tempfile
from pathlib import Path
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from chronos import wire
from chronos.clock import FakeClock
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.node.inner_reader import decode_batch
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings, LimitSettings, StoreSettings
from chronos.store.rocks import RocksStore

phase, count = sys.argv[1], int(sys.argv[2])
now = 1_700_000_000_000
records = []
for i in range(count):
    due = now + 60_000 + i
    message = DelayMessage(f"id-{i:08d}", "orders", b"k", b"x" * 100, [("h", b"v")], due)
    key, value, headers = wire.encode_add(message)
    records.append(Message(topic="chronos.inner", partition=0, offset=i, key=key, value=value,
                           headers=headers, timestamp=(TIMESTAMP_CREATE_TIME, now)))
if phase != "setup":
    limits, names = LimitSettings(), TopicNames("chronos")
    batches = [decode_batch(records[i:i + 2000], limits, names, now) for i in range(0, count, 2000)]
if phase == "pickle":
    for batch in batches:
        pickle.loads(pickle.dumps(batch.items, protocol=pickle.HIGHEST_PROTOCOL))
if phase == "apply":
    with tempfile.TemporaryDirectory() as folder:
        store = RocksStore(Path(folder), StoreSettings(wal_sync_interval_ms=60_000))
        ledger = Ledger(store, Frontier(0), FakeClock(now), DeleteSettings())
        for batch in batches:
            ledger.apply_decoded(batch.items, batch.offsets)
        store.close()
"""


def _export(revision: str, into: Path) -> Path:
    """The ``chronos`` package of ``revision``, unpacked into ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision, "chronos"],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True)
    tar_path = into / "src.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    tar_path.unlink()
    return into


def _instructions(source: Path, phase: str, messages: int, workload: Path) -> int:
    """callgrind's instruction count of one phase, run with ``source``'s chronos."""
    env = {**os.environ, "PYTHONPATH": str(source), "PYTHONHASHSEED": "0"}
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(workload),
            phase,
            str(messages),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=source,
    )
    for line in run.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip())
    raise RuntimeError(f"{phase} under valgrind failed:\n{run.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision, e.g. the last release")
    parser.add_argument("--candidate", default="HEAD", help="git revision (default HEAD)")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        workload = root / "workload.py"
        workload.write_text(WORKLOAD)
        sides = {
            "baseline": _export(args.baseline, root / "baseline"),
            "candidate": _export(args.candidate, root / "candidate"),
        }
        runs = [(side, phase) for side in sides for phase in PHASES]
        with ThreadPoolExecutor(args.jobs) as pool:
            counts = dict(
                zip(
                    runs,
                    pool.map(
                        lambda run: _instructions(sides[run[0]], run[1], args.messages, workload),
                        runs,
                    ),
                    strict=True,
                )
            )
    result: dict[str, dict[str, float]] = {}
    for side in sides:
        setup = counts[(side, "setup")]
        decode = counts[(side, "decode")]
        result[side] = {
            "decode": (decode - setup) / args.messages,
            "pickle": (counts[(side, "pickle")] - decode) / args.messages,
            "apply": (counts[(side, "apply")] - decode) / args.messages,
        }
    print(
        f"instructions per message, {args.messages} messages: {args.baseline} -> {args.candidate}"
    )
    print("| phase | baseline | candidate | ratio |\n| --- | ---: | ---: | ---: |")
    for name in ("decode", "pickle", "apply"):
        before, after = result["baseline"][name], result["candidate"][name]
        print(f"| {name} | {before:,.0f} | {after:,.0f} | {after / before:.3f} |")
    print(json.dumps({"messages": args.messages, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
