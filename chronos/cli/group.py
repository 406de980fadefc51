"""``chronos group``: a replica group's members, master, term, committed seek and lag."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from chronos.arguments import add_config, settings_from

if TYPE_CHECKING:
    from chronos.group.status import Member


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "group", help="show the replica group: members, master, term, committed seek, lag"
    )
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Kafka clients only when asked.
    from chronos.errors import ConfigError
    from chronos.group.spec import GroupSpec
    from chronos.group.status import SILENT_AFTER_MS, group_status
    from chronos.kafka.clients import KafkaClients

    settings = settings_from(args)
    spec = GroupSpec.of(settings)
    if spec is None:
        raise ConfigError("group.name is not set: this node is not in a replica group")
    silent_after_ms = max(SILENT_AFTER_MS, 4 * settings.group.progress_interval_ms)
    status = group_status(spec, KafkaClients(settings.kafka, "chronos-cli"), 10.0, silent_after_ms)
    if args.json:
        print(json.dumps(status.as_dict()))
        return 0
    headline = f"group {status.group} ({status.state}), master {status.master or 'none'}"
    if status.elected != status.master:
        waits = "waits for the master to fall silent" if status.master else "taking over"
        headline += f"; elected {status.elected or 'none'} ({waits})"
    print(headline)
    if status.term is not None and status.committed_seek_ms is not None:
        seek = datetime.fromtimestamp(status.committed_seek_ms / 1000, tz=UTC).isoformat()
        print(
            f"term {status.term}, committed seek {seek} by {status.committed_by} "
            f"({status.committed_age_ms} ms ago)"
        )
    else:
        print("no progress committed yet")
    if status.rebuild_floor is not None:
        print(
            f"rebuild floor {status.rebuild_floor} (pass {status.floor_age_ms} ms ago), "
            f"inner topic starts at {status.inner_starts}"
        )
    else:
        print(f"no refresh pass completed yet; inner topic starts at {status.inner_starts}")
    if status.rebuildable:
        print("an empty replica can rebuild every message from Kafka")
    else:
        print(
            "NOT REBUILDABLE: the inner topic no longer holds every record a new replica would "
            "need, until the master's next refresh pass (a replaced disk would not be eligible)"
        )
    for member in status.members:
        print(_member_line(member))
    return 0 if status.master is not None else 1


def _member_line(member: Member) -> str:
    """One member: its state (what it said of itself; its election role for a replica of an
    earlier release), its ingest lag, and what a state that is not eligible waits for."""
    state = member.state or ("master" if member.master else "backup")
    if member.elected and not member.master:
        state += " (elected)"
    lag = "?" if member.ingest_lag is None else str(member.ingest_lag)
    line = f"  {member.node:<20} {state:<20} ingest lag {lag:>8} records  {member.host}"
    from chronos.group import announcement

    detail = member.detail
    if member.state == announcement.INCOMPLETE:
        floor = detail.get("floor")
        line += f" began at {detail.get('began')}, waits for a floor there (now {floor})"
    elif member.state == announcement.RESTORING:
        line += f" began at {detail.get('began')}, waits for {detail.get('waits_for')}"
    return line.rstrip()
