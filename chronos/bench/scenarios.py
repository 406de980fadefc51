"""chronos scenarios: steady state, highest sustained rate, same-second burst, scale, proxy."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from chronos.bench.ladder import Ladder, climb, highest_sustained
from chronos.bench.load import LoadSpec, Observation, generate, observe
from chronos.bench.sampler import ProcessSampler, cpu_seconds
from chronos.bench.stack import BenchStack, Rig
from chronos.bench.stats import summarize
from proxy.client import DelayClient

Result = dict[str, Any]


def spawn_pool(workers: int = 2) -> cf.ProcessPoolExecutor:
    """Child processes for load and observers (spawned: librdkafka threads do not fork)."""
    return cf.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn")
    )


def preload_pending(stack: BenchStack, count: int) -> float:
    """Produce ``count`` messages due two to three hours ahead to the stack's inner topic, as
    fast as Kafka takes them (the pending state a scenario starts from); the seconds it took."""
    spec = LoadSpec(
        stack.bootstrap,
        stack.inner_topic,
        stack.target,
        count,
        0,
        delay_min_ms=2 * 3_600_000,
        delay_max_ms=3 * 3_600_000,
        prefix=f"pending-{time.time_ns()}",
    )
    with spawn_pool(1) as pool:
        produced = pool.submit(generate, spec).result()
    print(f"preloaded {count} pending in {produced['seconds']:.0f} s", flush=True)
    return produced["seconds"]


def run_load(
    stack: BenchStack,
    spec: LoadSpec,
    timeout_s: float,
    quiet_s: float = 30.0,
    visible: bool = False,
) -> tuple[dict[str, float], Observation, Result]:
    """Generate ``spec`` and observe its deliveries in child processes, sampling the node.

    The observer gives up after ``quiet_s`` without a delivery (longer than any planned wait);
    ``visible``: lateness when the observer received a record (see ``observe``).
    """
    broker = stack.broker_pid
    broker_cpu = cpu_seconds(broker) if broker else 0.0
    backups = [b.pid for b in stack.backups]
    backup_cpu = sum(cpu_seconds(pid) for pid in backups)
    started = time.monotonic()
    with spawn_pool() as pool, ProcessSampler(stack.node.pid) as sampler:
        watching = pool.submit(
            observe, stack.bootstrap, spec.target, spec.count, timeout_s, quiet_s, visible
        )
        sent = pool.submit(generate, spec).result()
        seen = watching.result()
    elapsed = time.monotonic() - started
    node: Result = dict(sampler.summary())
    node["cpu_s"] = round(sampler.cpu_s, 3)
    node["stages_cpu_s"] = sampler.stages()
    # Where the machine's CPU went (% of one core over the run): on a shared box the broker and
    # the load tools compete with the node, and this shows how much.
    node["machine_cpu_percent"] = {
        "node": node["cpu_percent_mean"],
        "broker": round(100 * (cpu_seconds(broker) - broker_cpu) / elapsed, 1) if broker else None,
        "load_generator": round(100 * sent["cpu_s"] / elapsed, 1),
        "observer": round(100 * seen.cpu_s / elapsed, 1),
    }
    if backups:
        node["machine_cpu_percent"]["backups"] = round(
            100 * (sum(cpu_seconds(pid) for pid in backups) - backup_cpu) / elapsed, 1
        )
    return sent, seen, node


def steady(
    stack: BenchStack,
    rate: float,
    seconds: float,
    payload: int = 200,
    max_delay_ms: int = 10_000,
    visible: bool = False,
) -> Result:
    """Schedule at ``rate``/s for ``seconds`` with delays over 1 s .. ``max_delay_ms``."""
    count = int(rate * seconds)
    spec = LoadSpec(
        stack.bootstrap,
        stack.inner_topic,
        stack.target,
        count,
        rate,
        delay_max_ms=max_delay_ms,
        payload_bytes=payload,
        prefix=f"s{rate:.0f}-{time.time_ns()}",
    )
    sent, seen, node = run_load(stack, spec, seconds + max_delay_ms / 1000 + 90, visible=visible)
    result: Result = {
        "rate_target": rate,
        "seconds": seconds,
        "ingest_rate": sent["rate"],
        **summarize(seen, count),
        "node": node,
        **per_message_cpu(node, count),
        "topics": stack.layout.as_result(),
    }
    result["sustained"] = (
        result["missing"] == 0
        and sent["rate"] >= 0.95 * rate
        and result["lateness_ms"]["p99"] <= 100
    )
    return result


def per_message_cpu(node: Result, count: int) -> Result:
    """The node's CPU per scheduled message (its decoder children included), whole and per
    stage (``sampler.stage_of``): where a regression is, not only that there is one."""
    if not count:
        return {}
    return {
        "cpu_us_per_msg": round(node["cpu_s"] * 1e6 / count, 2),
        "stage_cpu_us_per_msg": {
            stage: round(cpu_s * 1e6 / count, 2) for stage, cpu_s in node["stages_cpu_s"].items()
        },
    }


def highest_rate(ladder: Ladder) -> Result:
    """Steady runs at increasing rates (fresh node each) until p99 > 100 ms or loss."""

    def measure(_mode: str, rate: float) -> Result:
        with ladder.rig.stack() as stack:
            stack.start_node()
            run = steady(stack, rate, ladder.seconds, max_delay_ms=ladder.max_delay_ms)
        ladder.rig.log(
            f"steady {rate:>8.0f}/s: ingest {run['ingest_rate']:.0f}/s, delivered "
            f"{run['delivered']}/{run['expected']}, p99 {run['lateness_ms']['p99']} ms, "
            f"node cpu {run['node']['cpu_percent_mean']} %, {run.get('cpu_us_per_msg')} us/msg "
            f"{run.get('stage_cpu_us_per_msg')}"
        )
        return run

    runs = climb(ladder.rates, ["steady"], measure)["steady"]
    return {"runs": runs, "highest_sustained_rate": highest_sustained(runs)}


def replicated(ladder: Ladder, group_size: int = 2, visible: bool = True) -> Result:
    """What master/backup costs: at each rate, a node alone (at least once) and a replica group
    of ``group_size`` (transactional delivery, backups following), fresh each, until both fail.
    Lateness is measured when a ``read_committed`` consumer receives the record (``visible``)
    or from the delivered record's timestamp (stamped when produced), for both.

    A group of one compares the two delivery engines alone: transactions against the
    at-least-once pipeline, without a backup's share of the cores."""
    modes = {"alone": 0, "group": group_size}

    def measure(mode: str, rate: float) -> Result:
        with ladder.rig.stack(replicas=modes[mode]) as stack:
            stack.start_node()
            run = steady(
                stack, rate, ladder.seconds, max_delay_ms=ladder.max_delay_ms, visible=visible
            )
        run["mode"] = mode
        # Exactly once is the point of the group: a duplicate fails the rate.
        run["sustained"] = run["sustained"] and run["duplicates"] == 0
        ladder.rig.log(
            f"replicated {mode:<5} {rate:>8.0f}/s: ingest {run['ingest_rate']:.0f}/s, "
            f"delivered {run['delivered']}/{run['expected']}, p99 "
            f"{run['lateness_ms']['p99']} ms, duplicates {run['duplicates']}, "
            f"{run.get('cpu_us_per_msg')} us/msg {run.get('stage_cpu_us_per_msg')}"
        )
        return run

    runs = climb(ladder.rates, list(modes), measure)
    best = {mode: highest_sustained(found) for mode, found in runs.items()}
    return {
        "group_size": group_size,
        "lateness": "visible" if visible else "stamped",
        "runs": runs,
        "highest_sustained_rate": best,
        "ratio": round(best["group"] / best["alone"], 3) if best["alone"] else None,
    }


def burst(rig: Rig, count: int) -> Result:
    """``count`` messages all due in the same second, scheduled well before it."""
    with rig.stack() as stack:
        stack.start_node()
        lead_s = 10 + count / 15_000  # time to schedule and ingest them first
        due = int((time.time() + lead_s) * 1000)
        spec = LoadSpec(
            stack.bootstrap,
            stack.inner_topic,
            stack.target,
            count,
            0,
            due_at_ms=due,
            prefix=f"burst-{time.time_ns()}",
        )
        sent, seen, node = run_load(stack, spec, lead_s + 180, quiet_s=lead_s + 60)
    result: Result = {
        "count": count,
        "topics": stack.layout.as_result(),
        "due_ms": due,
        "schedule_rate": sent["rate"],
        **summarize(seen, count),
        "node": node,
        "all_delivered_after_due_s": round((seen.last_ms - due) / 1000, 3),
        "per_second": seen.per_second,
    }
    rig.log(
        f"burst {count}: all delivered {result['all_delivered_after_due_s']} s after due, "
        f"p99 {result['lateness_ms']['p99']} ms"
    )
    return result


def _applied(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """Records the node applied, from its (advisory) committed group offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=10
        )
        return sum(max(tp.offset, 0) for tp in committed)
    finally:
        consumer.close()


def scale(rig: Rig, count: int) -> Result:
    """Preload ``count`` messages due in a day: RSS, disk per message, ingest rate as the store
    grows, and restart time from process start to first delivery."""
    with rig.stack() as stack:
        stack.start_node()
        group = stack.settings.topics.names.node_group(stack.settings.node.node_id)
        spec = LoadSpec(
            stack.bootstrap,
            stack.inner_topic,
            stack.target,
            count,
            0,
            delay_min_ms=86_400_000,
            delay_max_ms=90_000_000,
            prefix=f"scale-{time.time_ns()}",
        )
        curve: list[tuple[float, int]] = []
        started = time.monotonic()
        with spawn_pool() as pool, ProcessSampler(stack.node.pid, 1.0) as sampler:
            producing = pool.submit(generate, spec)
            applied = 0
            while applied < count and time.monotonic() - started < 3600:
                time.sleep(2.0)
                applied = _applied(stack.bootstrap, group, stack.inner_topic, stack.layout.inner)
                curve.append((round(time.monotonic() - started, 1), applied))
                rig.log(f"scale: {applied}/{count} applied")
            sent = producing.result()
        node = sampler.summary()
        rates = [
            (b[1] - a[1]) / (b[0] - a[0])
            for a, b in zip(curve, curve[1:], strict=False)
            if b[0] > a[0]
        ]
        tenth = max(1, len(rates) // 10)
        disk = stack.store_bytes()
        # Restart: stop the node, schedule a probe due at once, start the node: the time from
        # the new process's spawn to the probe's delivery covers opening the store, catching
        # up with the inner topic and the first scan.
        stack.node.terminate()
        with DelayClient(stack.settings) as client:
            probe = client.send_delay(stack.target, b"probe", delay=0, id=f"probe-{time.time_ns()}")
        with spawn_pool() as pool:
            watching = pool.submit(observe, stack.bootstrap, stack.target, 1, 300)
            time.sleep(1.0)  # the observer is assigned before the node starts
            stack.node.start()
            seen = watching.result()
        restart_s = round(seen.last_ms / 1000 - stack.node.started_at, 3) if seen.unique else None
    result: Result = {
        "pending": count,
        "topics": stack.layout.as_result(),
        "produce_rate": sent["rate"],
        "node": node,
        "disk_bytes_per_message": round(disk / count, 1),
        "ingest_rate_first_10pct": round(sum(rates[:tenth]) / tenth) if rates else 0,
        "ingest_rate_last_10pct": round(sum(rates[-tenth:]) / tenth) if rates else 0,
        "ingest_curve": curve,
        "restart_to_first_delivery_s": restart_s,
        "probe_id": probe.id,
    }
    rig.log(
        f"scale {count}: rss {node['rss_mib_peak']} MiB, {result['disk_bytes_per_message']} "
        f"B/msg on disk, ingest {result['ingest_rate_first_10pct']}/s -> "
        f"{result['ingest_rate_last_10pct']}/s, restart {restart_s}"
    )
    return result


_WRK_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
{headers}wrk.body = [[{body}]]
"""


def proxy_http(rig: Rig, seconds: float, batch: int) -> Result:
    """HTTP requests/s and messages/s against `chronos proxy` with wrk (single and batch)."""
    if shutil.which("wrk") is None:
        return {"skipped": "wrk not installed (apt-get install wrk)"}
    with rig.stack() as stack:
        port = 18080
        proxy = stack.start_proxy(port)
        try:
            wait_http(port)
            one = f'{{"topic":"{stack.target}","value":"{"x" * 200}","delay_ms":3600000}}'
            many = '{"messages":[' + ",".join([one] * batch) + "]}"
            results: Result = {}
            for name, path, body, per_request in (
                ("single", "/v1/messages", one, 1),
                ("batch", "/v1/messages/batch", many, batch),
            ):
                requests_per_s, _requests = run_wrk(port, path, body, seconds)
                results[name] = {
                    "requests_per_s": requests_per_s,
                    "messages_per_s": round(requests_per_s * per_request),
                    "messages_per_request": per_request,
                }
                rig.log(
                    f"proxy {name}: {requests_per_s:.0f} req/s, "
                    f"{requests_per_s * per_request:.0f} msg/s"
                )
        finally:
            proxy.terminate()
            proxy.wait(30)
    return results


def wait_http(port: int) -> None:
    """Wait until the proxy on ``port`` answers ``/healthz`` (open without a token)."""
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("proxy did not come up")


def run_wrk(
    port: int, path: str, body: str, seconds: float, headers: dict[str, str] | None = None
) -> tuple[float, int]:
    """(requests/s, requests) of wrk (2 threads, 16 connections) POSTing ``body``; raises
    when any answer is not 2xx (a refusal must not pass for throughput)."""
    lines = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in (headers or {}).items())
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(_WRK_SCRIPT.format(headers=lines, body=body))
    out = subprocess.run(
        [
            "wrk",
            "-t2",
            "-c16",
            f"-d{int(seconds)}s",
            "-s",
            script.name,
            f"http://127.0.0.1:{port}{path}",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    Path(script.name).unlink()
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if non2xx:
        raise RuntimeError(f"proxy answered errors under load: {non2xx.group(0)}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if rate is None or total is None:
        return 0.0, 0
    return float(rate.group(1)), int(total.group(1))
