"""Scale-out: drain N blank jobs with `lowkiq worker --processes 1, 2, 4` in one run.

Each row starts a real supervisor with that many worker processes (automatic
shard assignment, leases) on a private Redis, after enqueueing the jobs, and
prints jobs/s, the speed-up over one process, and the CPU seconds of the
worker processes (Python) and of Redis.
Usage: python bench/scale.py [--jobs 100000] [--processes 1 2 4] [--shards 20]
"""

from __future__ import annotations

import argparse
import resource
import signal
import subprocess
import sys
import tempfile
import time

import redis
from _blank import BENCH, blank_env, start_blank_worker
from _machine import machine, processed

from lowkiq.clients.embedded import start_server


def redis_cpu(client: redis.Redis) -> float:
    """Seconds of CPU Redis has used (user + system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def children_cpu() -> float:
    """Seconds of CPU used by this process's finished (waited-for) descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def drain(url: str, jobs: int, processes: int, shards: int) -> tuple[float, float, float]:
    """Enqueue, then run the supervisor until all are processed: jobs/s, Python CPU, Redis CPU."""
    env = blank_env(url, shards)
    client = redis.Redis.from_url(url)
    client.flushall()
    subprocess.run([sys.executable, "-c", ENQUEUE, str(jobs)], env=env, cwd=BENCH, check=True)
    cpu_before, redis_before = children_cpu(), redis_cpu(client)
    supervisor = start_blank_worker(env, "--processes", str(processes))
    while processed(client, "Blank", shards) == 0:
        time.sleep(0.001)
    started = time.perf_counter()
    while processed(client, "Blank", shards) < jobs:
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    redis_used = redis_cpu(client) - redis_before
    supervisor.send_signal(signal.SIGTERM)
    supervisor.wait(60)
    return jobs / elapsed, children_cpu() - cpu_before, redis_used


ENQUEUE = """
import sys
import blank_app
jobs = int(sys.argv[1])
for start in range(0, jobs, 1000):
    blank_app.Blank.perform_async([{"id": i} for i in range(start, min(jobs, start + 1000))])
"""


def main() -> None:
    """Print one row per process count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--shards", type=int, default=20)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        print(machine())
        print(f"{args.jobs} blank jobs, {args.shards} shards, 5 threads per process, batch_size 1")
        header = ("processes", "jobs/s", "speed-up", "python cpu s", "redis cpu s")
        print("{:>9} {:>9} {:>8} {:>12} {:>11}".format(*header))
        base = None
        for processes in args.processes:
            rate, python_cpu, redis_used = drain(server.url, args.jobs, processes, args.shards)
            base = base or rate
            print(
                f"{processes:>9} {rate:>9,.0f} {rate / base:>7.2f}x "
                f"{python_cpu:>12.1f} {redis_used:>11.1f}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
