"""Online reshard: a queue of 100,000 jobs goes from 8 to 32 shards under a steady feed.

Two `lowkiq worker` processes run the chaos app (bench/chaos_app.py: 8 shards,
batch 5, every perform recorded with its versions, start, end and pid in a
second Redis).  The queue is filled with one job per id, then a feeder keeps
enqueueing newer versions of random ids while `lowkiq.ownership.resharding.reshard`
runs; then the feed stops and the queue drains.  Checked from the records:
payload versions lost, overlapping performs of one id, and versions performed
out of order for one id (across performs, not only within one).

Usage: python bench/reshard.py [--jobs 100000] [--to 32] [--processes 2] [--kill]
(--kill: SIGKILL a worker process in the middle of the reshard and start another).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import redis
from _machine import machine

from lowkiq.clients.embedded import start_server
from lowkiq.ownership.resharding import Progress, reshard

ROOT = Path(__file__).resolve().parents[1]


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "worker", "-r", "chaos_app"],
            env=env, cwd=ROOT / "bench", stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def check(rows: list[dict[str, object]], fed: dict[str, set[int]]) -> tuple[int, int, int]:
    """Lost versions, overlapping performs of one id, ids whose versions ran out of order."""
    seen: dict[str, set[int]] = defaultdict(set)
    by_id: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        seen[str(row["id"])].update(row["vs"])  # type: ignore[arg-type]
        by_id[str(row["id"])].append(row)
    lost = sum(len(versions - seen[job_id]) for job_id, versions in fed.items())
    overlaps = out_of_order = 0
    for performs in by_id.values():
        performs.sort(key=lambda row: row["start"])  # type: ignore[arg-type, return-value]
        for first, second in zip(performs, performs[1:], strict=False):
            overlaps += second["start"] < first["end"]  # type: ignore[operator]
        versions = [v for row in performs for v in row["vs"]]  # type: ignore[attr-defined]
        out_of_order += versions != sorted(versions)
    return lost, overlaps, out_of_order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--to", type=int, default=32)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--kill", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-reshard-"))
    queue_redis = start_server(directory / "queue")
    records = start_server(directory / "records")
    env = {**os.environ, "REDIS_URL": queue_redis.url, "RECORD_URL": records.url,
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    os.environ.update(REDIS_URL=queue_redis.url, RECORD_URL=records.url)
    sys.path.insert(0, str(ROOT / "bench"))
    import chaos_app

    worker = chaos_app.Chaos
    ids = [f"id{n}" for n in range(args.jobs)]
    fed: dict[str, set[int]] = defaultdict(set)
    versions: dict[str, int] = defaultdict(int)

    def enqueue(chosen: list[str]) -> None:
        jobs = []
        for job_id in chosen:
            versions[job_id] += 1
            jobs.append(
                {"id": job_id, "payload": {"v": versions[job_id]}, "score": versions[job_id]}
            )
        worker.perform_async(jobs)
        for job in jobs:
            fed[job["id"]].add(job["payload"]["v"])

    for start in range(0, len(ids), 1000):
        enqueue(ids[start : start + 1000])
    processes = [start_worker(env, directory / f"worker-{n}.log") for n in range(args.processes)]
    feeding = True
    fed_during = 0

    def feed() -> None:
        nonlocal fed_during
        while feeding:
            enqueue(random.sample(ids, 20))
            fed_during += 20
            time.sleep(0.01)

    feeder = threading.Thread(target=feed, daemon=True)
    try:
        time.sleep(1.0)  # the workers start and drain
        feeder.start()
        killed = False

        def progress(p: Progress) -> None:
            nonlocal killed
            print(p, flush=True)
            if args.kill and not killed and p.retired >= 3:
                killed = True
                processes[0].kill()
                processes[0].wait()
                processes[0] = start_worker(env, directory / "worker-restarted.log")
                print("  SIGKILLed a worker process and started another", flush=True)

        queued = worker.metrics()["length"]
        began = time.monotonic()
        layout = reshard(worker.queue(), args.to, progress)
        took = time.monotonic() - began
        feeding = False
        feeder.join()
        drain_began = time.monotonic()
        while worker.metrics()["length"] or worker.metrics()["busy"]:
            if time.monotonic() - drain_began > 600:
                raise SystemExit("the queue did not drain within 600 s")
            time.sleep(0.2)
        drained = time.monotonic() - drain_began
        rows = [json.loads(row) for row in redis.Redis.from_url(records.url).lrange(
            "chaos:records", 0, -1)]  # fmt: skip
        lost, overlaps, out_of_order = check(rows, fed)
        print(machine())
        print(
            f"reshard 8 -> {args.to} shards with {queued:,} jobs queued at its start, "
            f"{args.processes} worker processes{', one SIGKILLed during it' if args.kill else ''}"
        )
        print(f"  layout now: shards {layout.new_shards.start}..{layout.new_shards.stop - 1}")
        print(f"  reshard took: {took:.1f} s; payload versions fed meanwhile: {fed_during:,}")
        print(f"  final drain took {drained:.1f} s; performs recorded: {len(rows):,}")
        print(f"lost payload versions:              {lost}")
        print(f"overlapping performs of one id:     {overlaps}")
        print(f"ids with versions out of order:     {out_of_order}")
        print(f"morgue:                             {worker.metrics()['morgue_length']}")
    finally:
        feeding = False
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        queue_redis.stop()
        records.stop()


if __name__ == "__main__":
    main()
