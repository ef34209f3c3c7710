"""Fleet-wide rate limit: N `lowkiq worker` processes drain a backlog under a limit.

Prints the rate achieved in each 5-second window (jobs acked, sampled from the shards'
counters every 0.25 s, over the time between the samples that bound the window), then
the CPU the worker processes (from /proc, per thread) and Redis (``INFO cpu``) spent
per job, against the same drain with no limit.
Targets (issue 22): 475-525 jobs/s in every window after the first at a 500/s limit;
drain CPU per job within 5 % of the unlimited worker's.

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/rate_limit.py [--processes 4] [--rate 500] [--jobs 15000]
       [--threads 2] [--shards 8] [--batch 1] [--burst N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from _machine import machine, processed, redis_cpu

from lowkiq.clients.embedded import start_server

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 5.0
SAMPLE = 0.25


def cpu_seconds(pid: int) -> float:
    """CPU seconds the process's threads have run (Linux, to the nanosecond: the
    scheduler's count per thread; /proc/PID/stat counts in 10 ms ticks, too coarse for
    the idle processes' few ms a second).  The worker's threads live as long as it."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except FileNotFoundError:
            continue  # a thread that just ended
    return total / 1e9


#: Seconds the idle processes are watched before the backlog is enqueued.
IDLE = 3.0


def drain(
    url: str, args: argparse.Namespace, rate: float
) -> tuple[list[float], float, float, float, float]:
    """Start the processes, watch them idle, enqueue the backlog, sample until it is
    drained; returns the per-window rates, the drain's seconds, the CPU µs per job of the
    processes and of Redis, and the processes' idle CPU (ms per second, all together)."""
    client = redis.Redis.from_url(url)
    client.flushall()
    env = {
        **os.environ,
        "REDIS_URL": url,
        "BENCH_RATE": str(rate),
        "BENCH_SHARDS": str(args.shards),
        "BENCH_BATCH": str(args.batch),
        "BENCH_BURST": str(args.burst or 0),
        "PYTHONPATH": str(ROOT),
    }
    logs = Path(tempfile.mkdtemp(prefix="lowkiq-bench-rate-"))
    command = [sys.executable, "-m", "lowkiq", "worker", "-r", "rate_limit_app"]
    command += ["--threads", str(args.threads)]
    workers = []
    for number in range(args.processes):
        with (logs / f"worker-{number}.log").open("w") as out:
            workers.append(
                subprocess.Popen(command, env=env, cwd=ROOT / "bench", stdout=out, stderr=out)
            )
    try:
        deadline = time.monotonic() + 30
        while (
            sum("TTIN" in (logs / f"worker-{n}.log").read_text() for n in range(args.processes))
            < args.processes
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"the worker processes did not start; see {logs}")
            time.sleep(0.1)
        time.sleep(1.0)  # every process holds its shards
        os.environ["REDIS_URL"] = url
        os.environ["BENCH_SHARDS"], os.environ["BENCH_BATCH"] = str(args.shards), str(args.batch)
        sys.path.insert(0, str(ROOT / "bench"))
        import rate_limit_app

        paced = rate_limit_app.Paced
        paced.rate_limit = None  # enqueueing only
        import lowkiq

        lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
        idle = sum(cpu_seconds(w.pid) for w in workers)
        time.sleep(IDLE)
        cpu = sum(cpu_seconds(w.pid) for w in workers)
        idle = (cpu - idle) / IDLE * 1000
        redis_before = redis_cpu(client)
        # The first 1,000 go in before the clock starts: the backlog is there at once.
        started = time.perf_counter()
        for start in range(0, args.jobs, 1000):
            paced.perform_async([{"id": n} for n in range(start, min(args.jobs, start + 1000))])
        samples = [(0.0, 0)]
        done = 0
        while done < args.jobs:
            time.sleep(SAMPLE)
            done = processed(client, paced.queue_name, args.shards)
            samples.append((time.perf_counter() - started, done))
        elapsed = samples[-1][0]
        cpu = sum(cpu_seconds(w.pid) for w in workers) - cpu
        redis_used = redis_cpu(client) - redis_before
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
    # A window runs from the first sample at or after its start to the first at or after
    # its end: its rate is the jobs acked between the two over the time between them
    # (samples drift a little later than every SAMPLE seconds).
    rates = []
    edge = WINDOW
    last_at, last = 0.0, 0
    for at, count in samples:
        if at >= edge:
            rates.append((count - last) / (at - last_at))
            last_at, last, edge = at, count, edge + WINDOW
    return rates, elapsed, cpu / args.jobs * 1e6, redis_used / args.jobs * 1e6, idle


def main() -> None:
    """Print the windows of the limited drain and the CPU comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--burst", type=int, default=None, help="default: the default burst")
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        print(machine())
        print(
            f"{args.processes} processes x {args.threads} threads, {args.shards} shards, "
            f"batch {args.batch}, {args.jobs} jobs, limit {args.rate:g}/s"
            + (f" (burst {args.burst})" if args.burst else "")
        )
        rates, elapsed, cpu, redis_us, idle = drain(server.url, args, args.rate)
        for number, rate in enumerate(rates, 1):
            span = f"{(number - 1) * WINDOW:4.0f}-{number * WINDOW:3.0f} s"
            mark = "" if number > 1 else "  (first window)"
            print(f"window {number:2d} ({span}): {rate:6.1f} jobs/s{mark}")
        later = rates[1:]
        if later:
            low, high = 0.95 * args.rate, 1.05 * args.rate
            inside = sum(1 for rate in later if low <= rate <= high)
            print(
                f"windows after the first: min {min(later):.1f}, max {max(later):.1f} jobs/s; "
                f"{inside} of {len(later)} within {low:g}-{high:g}"
            )
        free_rates, free_elapsed, free_cpu, free_redis, free_idle = drain(server.url, args, 0.0)
        heads = ("jobs/s", "drain s", "worker CPU", "above idle", "Redis CPU")
        print(f"{'':10} {heads[0]:>8} {heads[1]:>8} {heads[2]:>11} {heads[3]:>11} {heads[4]:>10}")
        for name, seconds, per_job, redis_per_job, idle_ms in (
            ("limited", elapsed, cpu, redis_us, idle),
            ("unlimited", free_elapsed, free_cpu, free_redis, free_idle),
        ):
            above = per_job - idle_ms / 1000 * seconds / args.jobs * 1e6
            print(
                f"{name:10} {args.jobs / seconds:8.1f} {seconds:8.1f} {per_job:8.1f} µs "
                f"{above:8.1f} µs {redis_per_job:7.1f} µs"
            )
        idle_free = free_cpu - free_idle / 1000 * free_elapsed / args.jobs * 1e6
        idle_limited = cpu - idle / 1000 * elapsed / args.jobs * 1e6
        print(
            f"worker CPU per job, limited / unlimited: {cpu / free_cpu:.3f} "
            f"({idle_limited / idle_free:.3f} above the idle processes' "
            f"{idle:.1f} ms/s)"
        )
        print(f"Redis CPU per job, limited / unlimited: {redis_us / free_redis:.3f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
