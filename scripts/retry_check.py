#!/usr/bin/env python3
"""A target topic Kafka refuses, under load on another topic: the retry policy per topic
(``delivery.topics``) on Apache Kafka with its authorizer, a node alone or a replica group.

Starts Apache Kafka with ACLs, a node process (or the one replica of a group), schedules
``--rate`` messages/s to an allowed topic (due 1 s after sending) for the whole run and, after
a few seconds, ``--refused`` messages at once to a topic an ACL denies chronos' writes. Then:

- ``--scenario retry``: the policy retries (backoff 0.5 s doubling to 5 s, no limit); the ACL is
  taken back ``--deny`` seconds after they were due. Each refused message must then be
  delivered once, none dead-lettered, and its status must have shown the failed attempts.
- ``--scenario age``: the policy has ``max_age_s = --max-age``; the ACL stays. Each refused
  message must be dead-lettered once, with the reason, after its maximum age.

In both, every message of the allowed topic must be delivered once, never early; its lateness
(record timestamp minus due time) is the "nothing else held back" figure: p50, p99, max, and
the worst second's p99.

    python scripts/retry_check.py --mode alone --scenario retry --deny 30
    python scripts/retry_check.py --mode group --scenario age --max-age 10

The last line of output is the JSON summary; exit code 0 when every check held.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections import Counter
from typing import Any

import httpx
from confluent_kafka.admin._acl import AclOperation  # not re-exported explicitly
from confluent_kafka.admin._resource import ResourceType

from chronos.bench.load import LoadSpec, generate, steady_beside
from chronos.bench.stack import BenchStack
from chronos.devstack.acls import AUTHORIZER, allow_again, deny
from chronos.devstack.check import finish
from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.watch import Collected, DeliveryWatcher, lateness_summary, waited
from chronos.kafka.admin import create_topic

#: What the refused topic's policy retries with (scenario retry; age adds max_age_s).
BACKOFF = {"backoff_initial_ms": 500, "backoff_max_ms": 5_000}
#: Seconds of load before the refused messages are sent, and after the last check.
LEAD_S, TAIL_S = 5.0, 10.0
#: Delay of every message.
DELAY_MS = 1_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _policy_toml(scenario: str, max_age_s: float, admin_port: int) -> str:
    """The node's admin port and the policy, for every topic (``"*"``): the refused topic is
    named after the stack's namespace, which the stack picks."""
    lines = [f"{key} = {value}" for key, value in BACKOFF.items()]
    if scenario == "age":
        lines.append(f"max_age_s = {max_age_s}")
    return f'[admin]\nport = {admin_port}\n[delivery.topics."*"]\n' + "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    broker = KafkaBroker(properties=AUTHORIZER).start()
    try:
        return _run_on(broker.bootstrap, args)
    finally:
        broker.stop()


def _run_on(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    admin_port = _free_port()
    stack = BenchStack(
        bootstrap=bootstrap,
        node_settings=_policy_toml(args.scenario, args.max_age, admin_port),
        replicas=1 if args.mode == "group" else 0,
    )
    refused = f"{stack.namespace}-refused"
    seen = Collected()
    with stack:
        create_topic(stack.settings, refused, 1)
        deny(bootstrap, ResourceType.TOPIC, refused, AclOperation.WRITE)
        stack.start_node()
        dead = stack.settings.topics.names.dead_letter
        watcher = DeliveryWatcher(bootstrap, [stack.target, refused, dead], seen.add)
        watcher.start()
        run_s = LEAD_S + (args.deny if args.scenario == "retry" else args.max_age) + 20 + TAIL_S
        load, loader = steady_beside(
            bootstrap, stack.inner_topic, stack.target, args.rate, run_s, DELAY_MS
        )
        time.sleep(LEAD_S)
        sent_at = time.time()
        generate(
            LoadSpec(
                bootstrap,
                stack.inner_topic,
                refused,
                count=args.refused,
                rate=0,
                delay_min_ms=DELAY_MS,
                delay_max_ms=DELAY_MS,
                prefix="r",
            )
        )
        expected = {f"r-{n}" for n in range(args.refused)}
        due_s = sent_at + DELAY_MS / 1000
        result: dict[str, Any] = {
            "mode": args.mode,
            "scenario": args.scenario,
            "rate": args.rate,
            "refused": args.refused,
        }
        if args.scenario == "retry":
            time.sleep(max(0.0, due_s + args.deny - time.time()))
            status = httpx.get(f"http://127.0.0.1:{admin_port}/v1/messages/r-0", timeout=10)
            result["status_before_allow"] = status.json().get("delivery_attempts")
            allowed_at = time.time()
            allow_again(bootstrap, refused, AclOperation.WRITE)
            waited(lambda: expected <= seen.ids(refused), 60)
            copies = seen.of(refused)
            result["refused_delivered"] = len({d.id for d in copies} & expected)
            result["refused_duplicates"] = len(copies) - len({d.id for d in copies})
            after = sorted(d.produced_ms / 1000 - allowed_at for d in copies)
            result["delivered_after_allow_s"] = (
                {"first": round(after[0], 2), "last": round(after[-1], 2)} if after else None
            )
            status = httpx.get(f"http://127.0.0.1:{admin_port}/v1/messages/r-0", timeout=10)
            result["status_after"] = status.json()
        else:
            waited(lambda: expected <= seen.ids(dead), args.max_age + 60)
            letters = [d for d in seen.of(dead) if d.id in expected]
            result["dead_lettered"] = len({d.id for d in letters})
            result["dead_letter_duplicates"] = len(letters) - len({d.id for d in letters})
            ages = sorted(d.produced_ms - d.due_ms for d in letters)
            result["dead_lettered_after_due_ms"] = (
                {"min": ages[0], "max": ages[-1]} if ages else None
            )
            reasons = Counter(
                (dict(d.headers).get("chronos-dlq-reason") or b"").decode()[:40] for d in letters
            )
            result["reasons"] = dict(reasons.most_common(3))
            sample = next(iter(letters), None)
            result["reason_sample"] = (
                None
                if sample is None
                else (dict(sample.headers).get("chronos-dlq-reason") or b"").decode()
            )
            result["refused_delivered"] = len(seen.ids(refused))
        loader.join(run_s + 120)
        other = {f"o-{n}" for n in range(load.count)}
        waited(lambda: other <= seen.ids(stack.target), 60)
        watcher.stop()
        delivered = seen.of(stack.target)
        result["other"] = dict(lateness_summary(delivered))
        result["other"]["lost"] = len(other - {d.id for d in delivered})
        result["other"]["duplicates"] = len(delivered) - len({d.id for d in delivered})
    return result


def held(result: dict[str, Any]) -> bool:
    other = result["other"]
    if other["lost"] or other["duplicates"] or other["early"]:
        return False
    if result["scenario"] == "retry":
        attempts = result.get("status_before_allow") or {}
        return bool(
            result["refused_delivered"] == result["refused"]
            and result["refused_duplicates"] == 0
            and attempts.get("attempts", 0) >= 2
        )
    return bool(
        result["dead_lettered"] == result["refused"]
        and result["dead_letter_duplicates"] == 0
        and result["refused_delivered"] == 0
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("alone", "group"), default="alone")
    parser.add_argument("--scenario", choices=("retry", "age"), default="retry")
    parser.add_argument("--deny", type=float, default=30.0, help="seconds refused (retry)")
    parser.add_argument("--max-age", type=float, default=10.0, help="max_age_s (age)")
    parser.add_argument("--rate", type=float, default=500.0, help="allowed topic, msg/s")
    parser.add_argument("--refused", type=int, default=100, help="messages to the refused topic")
    args = parser.parse_args(argv)
    result = run(args)
    result["held"] = held(result)
    return finish(result | {"ok": result["held"]})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
