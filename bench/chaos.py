"""Chaos: worker processes and Redis killed at random while updates keep coming.

K `lowkiq worker` processes share the shards automatically (no --nodes).  A
feeder enqueues versioned updates of a few hundred ids; meanwhile, every 1-3 s,
one of: SIGKILL a worker (and start a new one), SIGTERM a worker (and start a
new one), SIGSTOP a worker past its lease then SIGCONT it, or kill -9 Redis
(append-only file, appendfsync always) and restart it.  Then a clean drain,
and a check of every recorded perform: payload versions lost, overlapping
performs of one id, versions out of score order within a call, the morgue.

Performs by a process that was SIGSTOPped while they ran are counted apart:
such a perform goes on after its lease passed to another process (whose run
of the same batch may overlap it), and its result is refused by fencing.
Each process runs ``--threads`` threads (default 2), so a thread serves several of the
8 shards and sends their pops together (one write per round).
Usage: python bench/chaos.py [--seconds 180] [--processes 3] [--ids 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import redis
from _machine import machine

from lowkiq.embedded import EmbeddedServer, start_server

ROOT = Path(__file__).resolve().parents[1]
LEASE_TTL = 2.0


class Worker:
    """One `lowkiq worker` process of the run, its output in a log file."""

    def __init__(self, env: dict[str, str], logs: Path, number: int) -> None:
        self.log = logs / f"worker-{number}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "lowkiq", "worker", "-r", "chaos_app"],
                env=env, cwd=ROOT / "bench", stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid


class Run:
    """The processes, the feeder and the record of what happened."""

    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.directory = directory
        self.queue_dir = directory / "queue"
        self.queue = self.start_queue_redis()
        self.records = start_server(directory / "records")
        self.env = {
            **os.environ,
            "REDIS_URL": self.queue.url,
            "RECORD_URL": self.records.url,
            "CHAOS_LEASE_TTL": str(LEASE_TTL),
            "LOWKIQ_THREADS_PER_NODE": str(args.threads),
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update(REDIS_URL=self.queue.url, RECORD_URL=self.records.url)
        sys.path.insert(0, str(ROOT / "bench"))
        import chaos_app

        self.worker_class = chaos_app.Chaos
        self.started = 0
        self.workers: list[Worker] = []
        self.fed: dict[str, set[int]] = defaultdict(set)
        self.versions: dict[str, int] = defaultdict(int)
        self.pauses: list[tuple[int, float, float]] = []
        self.events: dict[str, int] = defaultdict(int)
        self.feeding = True

    def start_queue_redis(self) -> EmbeddedServer:
        return start_server(self.queue_dir, persistent=True, config=["--appendfsync", "always"])

    def start_worker(self) -> None:
        self.workers.append(Worker(self.env, self.directory, self.started))
        self.started += 1

    def feed(self) -> None:
        """Enqueue versioned updates of random ids until told to stop."""
        ids = [f"id{n}" for n in range(self.args.ids)]
        while self.feeding:
            chosen = random.sample(ids, 10)
            jobs = []
            for job_id in chosen:
                self.versions[job_id] += 1
                version = self.versions[job_id]
                jobs.append({"id": job_id, "payload": {"v": version}, "score": version})
            try:
                self.worker_class.perform_async(jobs)
            except Exception:  # noqa: BLE001 - Redis is down: these versions may be lost
                self.events["enqueue refused (Redis down)"] += 1
                time.sleep(0.05)
                continue
            for job in jobs:
                self.fed[job["id"]].add(job["payload"]["v"])
            time.sleep(0.01)

    def chaos(self) -> None:
        """One random disruption."""
        action = random.choices(["sigkill", "sigterm", "sigstop", "redis"], weights=[4, 2, 2, 2])[0]
        if action == "redis" or self.events["redis kill -9"] < 5 and random.random() < 0.1:
            self.queue.process.kill()
            self.queue.process.wait()
            self.events["redis kill -9"] += 1
            time.sleep(0.3)
            self.queue = self.start_queue_redis()
            return
        victim = random.choice(self.workers)
        if action == "sigkill":
            victim.process.kill()
            victim.process.wait()
            self.events["worker SIGKILL"] += 1
        elif action == "sigterm":
            victim.process.terminate()
            try:
                victim.process.wait(30)
            except subprocess.TimeoutExpired:
                victim.process.kill()
            self.events["worker SIGTERM"] += 1
        else:
            paused_at = time.time()
            victim.process.send_signal(signal.SIGSTOP)
            time.sleep(LEASE_TTL + random.uniform(0.5, 1.5))
            victim.process.send_signal(signal.SIGCONT)
            self.pauses.append((victim.pid, paused_at, time.time()))
            self.events["worker SIGSTOP past its lease"] += 1
            return
        self.workers.remove(victim)
        self.start_worker()

    def drain(self) -> float:
        """Wait until every queued job is performed; returns the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < 300:
            metrics = self.worker_class.metrics()
            if metrics["length"] == 0 and metrics["busy"] == 0:
                return time.monotonic() - started
            time.sleep(0.2)
        raise SystemExit("the queue did not drain within 300 s")

    def stop(self) -> None:
        for worker in self.workers:
            worker.process.terminate()
        for worker in self.workers:
            worker.process.wait(60)

    def paused(self, pid: int, start: float, end: float) -> bool:
        return any(p == pid and a < end and start < b for p, a, b in self.pauses)

    def report(self, drain_seconds: float) -> None:
        client = redis.Redis.from_url(self.records.url)
        rows = [json.loads(row) for row in client.lrange("chaos:records", 0, -1)]
        seen: dict[str, set[int]] = defaultdict(set)
        by_id: dict[str, list[dict[str, object]]] = defaultdict(list)
        out_of_order = 0
        for row in rows:
            seen[row["id"]].update(row["vs"])
            by_id[row["id"]].append(row)
            out_of_order += row["vs"] != sorted(row["vs"])
        morgue = self.worker_class.metrics()["morgue_length"]
        lost = sum(len(self.fed[i] - seen[i]) for i in self.fed)
        overlaps = paused_overlaps = 0
        for performs in by_id.values():
            performs.sort(key=lambda row: row["start"])
            for n, first in enumerate(performs):
                for second in performs[n + 1 :]:
                    if second["start"] >= first["end"]:
                        break
                    if self.paused(first["pid"], first["start"], first["end"]) or self.paused(
                        second["pid"], second["start"], second["end"]
                    ):
                        paused_overlaps += 1
                    else:
                        overlaps += 1
        fenced = sum(
            path.read_text(errors="replace").count("is no longer held")
            for path in self.directory.glob("worker-*.log")
        )
        print(machine())
        print(
            f"{self.args.seconds:.0f} s, {self.args.processes} processes without --nodes, "
            f"{self.args.ids} ids, lease TTL {LEASE_TTL:.0f} s"
        )
        for event, count in sorted(self.events.items()):
            print(f"  {event}: {count}")
        print(f"  payload versions fed: {sum(len(v) for v in self.fed.values())}")
        print(f"  performs recorded: {len(rows)}; final drain took {drain_seconds:.1f} s")
        print(f"  results refused by fencing (logged): {fenced}")
        print(f"lost payload versions:               {lost}")
        print(f"overlapping performs of one id:      {overlaps}")
        print(f"  (more with a perform paused past its lease: {paused_overlaps})")
        print(f"versions out of score order in a call: {out_of_order}")
        print(f"morgue:                              {morgue}")

    def close(self) -> None:
        self.queue.stop()
        self.records.stop()


def main() -> None:
    """Run the chaos, drain, check, print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--ids", type=int, default=200)
    parser.add_argument(
        "--threads", type=int, default=2, help="per process: several shards each, popped together"
    )
    args = parser.parse_args()
    run = Run(args, Path(tempfile.mkdtemp(prefix="lowkiq-chaos-")))
    try:
        for _ in range(args.processes):
            run.start_worker()
        feeder = threading.Thread(target=run.feed, daemon=True)
        feeder.start()
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            time.sleep(random.uniform(1.0, 3.0))
            run.chaos()
        run.feeding = False
        feeder.join()
        run.report(run.drain())
        run.stop()
    finally:
        for worker in run.workers:
            if worker.process.poll() is None:
                worker.process.kill()
        run.close()


if __name__ == "__main__":
    main()
