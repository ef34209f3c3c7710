"""lowkiq side by side with Sidekiq on the same job, in one run: drain rate and CPU,
enqueue Redis CPU, idle enqueue -> perform latency; or (``--callgrind``) Redis
instructions per job of the enqueue and of the drain.

Sidekiq is Debian's (``apt-get install -y ruby-sidekiq``: Sidekiq 6.4 on Ruby 3.1);
without ``sidekiq`` and ``ruby`` on PATH every part runs lowkiq only and says so.

Drain. Every round enqueues N jobs (default 20,000), then starts one worker process and
times the drain from the first to the N-th job, for: `lowkiq worker` at its defaults
(5 shards, batch_size 1, 5 threads), Sidekiq (`sidekiq -c 5`) and `lowkiq worker` at
batch_size 10, in turn, so that a noisy host hits all alike.
The job is the same in both systems: one ``INCR`` of ``bench:counter`` through the
system's own connection (``lowkiq.settings.client()``, ``Sidekiq.redis``); the job
that brings the counter to 1 and the one that brings it to N append their time to
``bench:marks``, which this script waits on (BLPOP). Nothing is read from
Sidekiq::Stats, whose ``processed`` the heartbeat flushes only every few seconds.
The enqueue is one process of the system's own client (lowkiq ``perform_async``,
Sidekiq ``Sidekiq::Client.push_bulk``), 1,000 jobs a call.

Per run it prints jobs/s ((N - 1) / the time between the two marks), the worker
process's CPU per job (utime + stime from /proc, its descendants included) and the
Redis server's (/proc), both over the same window, and the Redis server's CPU per job
of the enqueue (INFO cpu, from the enqueuer's start to its exit); then the
lowkiq/Sidekiq ratios of each round and the targets (median over the rounds): lowkiq
at its defaults drains >= 1.5x Sidekiq's jobs/s with <= its Redis and worker CPU per
job, enqueues with <= 2x its Redis CPU per job; at batch_size 10, >= 2.5x its jobs/s.
Redis is a private server started here (the embedded binary the tests use, Redis 6.2,
or the one ``--redis-server`` names: a Redis 7 runs lowkiq's scripts as Redis
Functions) on 127.0.0.1: DB 0 for lowkiq, DB 1 for Sidekiq, flushed before each run.

Each round also times the job alone, with no queue at all: one Python process whose
``--threads`` threads, each on a connection of its own, do the N ``INCR`` (and the two
marks) back to back (DB 2). That is the most any Python worker running this job on
that many threads can drain on the host in that round: the report says what it is
against Sidekiq, and how close lowkiq at batch_size 10 comes to it.

Latency (after the drains; bench/vs_sidekiq_latency.py): ``--latency-rounds`` rounds
(default 2) of ``--latency-samples`` samples (default 200) for lowkiq, then Sidekiq,
then the host's floor (a bare RPUSH waking a BLPOP in another process): one job
enqueued into an idle worker, from the enqueuer's send to the job's start, both on
CLOCK_MONOTONIC of this host. Printed: p50 / p99 / max per round and overall, the
lowkiq/Sidekiq ratios and the targets (lowkiq p50 <= Sidekiq's p50; p99 <= max(2 ms,
1.5x Sidekiq's p99)). These figures move with the host's load: compare the systems of
one run.

``--callgrind`` (bench/vs_sidekiq_callgrind.py, whose docstring says how each phase's
window is cut): one Redis under valgrind's callgrind; per system (lowkiq, lowkiq with
two groups in every shard, Sidekiq) the Redis instructions per job of enqueueing N jobs
(default 3,000) 1,000 a call, and of draining them, the Redis commands per job of
the drain, the ratios lowkiq/Sidekiq and groups/no groups, and the targets (drain <=
2.0x Sidekiq's, enqueue <= 5.0x). Other load on the host leaves the counts alone, but
lowkiq's drain count per job moved between runs by up to a third (see there why). No
drain timing nor latency in this mode.

Not run in CI.

Usage: python bench/vs_sidekiq.py [--jobs 20000] [--rounds 3] [--threads 5]
           [--latency-samples 200] [--latency-rounds 2] [--redis-server PATH]
       python bench/vs_sidekiq.py --rounds 0            # latency only
       python bench/vs_sidekiq.py --latency-samples 0   # drains only
       python bench/vs_sidekiq.py --callgrind [--jobs 3000] [--threads 5] [--idle-seconds 10]
              [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
from _machine import machine, redis_cpu

from lowkiq.clients.embedded import start_server

BENCH = Path(__file__).resolve().parent
COUNTER = "bench:counter"
MARKS = "bench:marks"
#: Seconds to wait for a started worker's first job.
FIRST_JOB_TIMEOUT = 60.0
#: Seconds to wait for an enqueue, and for a worker to exit after TERM.
STEP_TIMEOUT = 120.0
#: The slowest drain waited for, in jobs/s (beyond it the run fails).
SLOWEST_RATE = 200.0

LOWKIQ_ENQUEUE = """
import sys
import vs_sidekiq_app
jobs = int(sys.argv[1])
for start in range(0, jobs, 1000):
    vs_sidekiq_app.Incr.perform_async([{"id": i} for i in range(start, min(jobs, start + 1000))])
"""

SIDEKIQ_JOB = """# The Sidekiq job of lowkiq's bench/vs_sidekiq.py, written there at run time.
require "sidekiq"
Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
JOBS = Integer(ENV.fetch("BENCH_JOBS"))
JOB_MODULE = defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker
# No "start"/"done" line per job, as lowkiq runs at --log-level warning.
Sidekiq.logger.level = Logger::WARN

class IncrJob
  include JOB_MODULE
  sidekiq_options retry: false

  def perform
    Sidekiq.redis do |conn|
      count = conn.incr("bench:counter")
      conn.rpush("bench:marks", "#{count} #{Time.now.to_f}") if count == 1 || count == JOBS
    end
  end
end

# The job of the latency bench (vs_sidekiq_latency.py): notes when perform started, on
# CLOCK_MONOTONIC (Python's time.perf_counter on Linux).
class StartJob
  include JOB_MODULE
  sidekiq_options retry: false

  def perform
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Sidekiq.redis { |conn| conn.rpush("bench:starts", started.to_s) }
  end
end
"""

#: The job alone: argv[1] threads, each on a connection of its own, share the N INCR.
CEILING_WORKER = """
import os, sys, threading, time
import redis
url, jobs, threads = os.environ["REDIS_URL"], int(os.environ["BENCH_JOBS"]), int(sys.argv[1])
left = iter(range(jobs))  # one next() at a time under the GIL: each INCR is done once

def run():
    client = redis.Redis.from_url(url, single_connection_client=True)
    for _ in left:
        count = client.incr("bench:counter")
        if count == 1 or count == jobs:
            client.rpush("bench:marks", f"{count} {time.time()}")

for thread in [threading.Thread(target=run) for _ in range(threads)]:
    thread.start()
time.sleep(3600)  # until stopped, as a worker would be
"""

SIDEKIQ_ENQUEUE = """
JOBS.times.each_slice(1000) do |slice|
  Sidekiq::Client.push_bulk("class" => IncrJob, "args" => slice.map { [] })
end
"""

SIDEKIQ_DESCRIBE = """
puts "Sidekiq #{Sidekiq::VERSION} (Ruby #{RUBY_VERSION}): IncrJob includes #{JOB_MODULE}, " \\
  "perform does Sidekiq.redis { |conn| conn.incr(...) } once per job; " \\
  "its logger at WARN (no line per job)"
"""


@dataclass
class Run:
    """One drain: its rate and CPU per job, and the Redis CPU per job of its enqueue."""

    name: str
    round: int
    seconds: float
    rate: float
    worker_us: float
    redis_us: float
    enqueue_redis_us: float


@dataclass
class System:
    """How to enqueue into, and start the worker of, one of the compared setups."""

    name: str
    db: int
    enqueue: list[str]
    worker: list[str]
    env: dict[str, str]
    cwd: Path


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """The live processes under ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int, others: Sequence[int] = ()) -> float:
    """CPU seconds (user + system) of ``pid``, its waited-for children and ``others``."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = _stat(pid)
    total = sum(int(fields[index]) for index in (11, 12, 13, 14))
    for other in others:
        with contextlib.suppress(OSError):
            total += sum(int(value) for value in _stat(other)[11:13])
    return total / tick


def stop(process: subprocess.Popen[bytes]) -> None:
    """TERM a worker started in a session of its own, then KILL what is left of it."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"  (pid {process.pid} still running {STEP_TIMEOUT:.0f} s after TERM: killed)")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(STEP_TIMEOUT)


def mark(
    client: redis.Redis, worker: subprocess.Popen[bytes], timeout: float, log: Path
) -> tuple[int, float]:
    """The next ``(count, time)`` a job appended to bench:marks, waiting up to ``timeout``
    seconds while the worker lives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        reply = client.blpop([MARKS], timeout=1)
        if reply is not None:
            count, stamp = reply[1].split()
            return int(count), float(stamp)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    state = "no mark" if worker.poll() is None else f"the worker exited ({worker.returncode})"
    raise RuntimeError(f"{state} within {timeout:.0f} s; the worker's log:\n{tail}")


def drain(system: System, url: str, redis_pid: int, jobs: int, number: int, logs: Path) -> Run:
    """Enqueue ``jobs`` into an emptied DB, start the worker, time the first to the last job."""
    client = redis.Redis.from_url(f"{url}/{system.db}", socket_timeout=STEP_TIMEOUT)
    client.flushdb()
    enqueue_before = redis_cpu(client)
    subprocess.run(
        system.enqueue, env=system.env, cwd=system.cwd, check=True, timeout=STEP_TIMEOUT,
        capture_output=True,
    )  # fmt: skip
    enqueue_used = redis_cpu(client) - enqueue_before
    log = logs / f"{system.name.split()[0]}-{number}.log"
    with log.open("wb") as output:
        worker = subprocess.Popen(
            system.worker, env=system.env, cwd=system.cwd, stdout=output, stderr=output,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        first, first_at = mark(client, worker, FIRST_JOB_TIMEOUT, log)
        tree = descendants(worker.pid)
        worker_before, redis_before = cpu_seconds(worker.pid, tree), cpu_seconds(redis_pid)
        last, last_at = mark(client, worker, max(STEP_TIMEOUT, jobs / SLOWEST_RATE), log)
        worker_used = cpu_seconds(worker.pid, tree) - worker_before
        redis_used = cpu_seconds(redis_pid) - redis_before
    finally:
        stop(worker)
    done = int(client.get(COUNTER) or 0)
    if (first, last, done) != (1, jobs, jobs):
        raise RuntimeError(f"{system.name}: marks {first}, {last} and {done} jobs done of {jobs}")
    seconds = last_at - first_at
    per_job = 1e6 / (jobs - 1)
    return Run(
        system.name, number, seconds, (jobs - 1) / seconds, worker_used * per_job,
        redis_used * per_job, enqueue_used * 1e6 / jobs,
    )  # fmt: skip


def lowkiq_system(url: str, jobs: int, threads: int, batch: int) -> System:
    """`lowkiq worker -r vs_sidekiq_app` with ``threads`` threads and ``batch_size``."""
    env = {
        **os.environ,
        "REDIS_URL": f"{url}/0",
        "BENCH_JOBS": str(jobs),
        "BENCH_SHARDS": "5",
        "BENCH_BATCH": str(batch),
        "PYTHONPATH": os.pathsep.join([str(BENCH), str(BENCH.parent)]),
    }
    return System(
        name=f"lowkiq 5 shards, batch {batch}",
        db=0,
        enqueue=[sys.executable, "-c", LOWKIQ_ENQUEUE, str(jobs)],
        worker=[sys.executable, "-m", "lowkiq", "worker", "-r", "vs_sidekiq_app",
                "--threads", str(threads), "--log-level", "warning"],
        env=env,
        cwd=BENCH,
    )  # fmt: skip


def sidekiq_system(url: str, jobs: int, threads: int, directory: Path) -> System:
    """`sidekiq -c threads` on the Ruby job written into ``directory``."""
    job = directory / "incr_job.rb"
    job.write_text(SIDEKIQ_JOB)
    env = {**os.environ, "REDIS_URL": f"{url}/1", "BENCH_JOBS": str(jobs)}
    return System(
        name=f"Sidekiq -c {threads}",
        db=1,
        enqueue=["ruby", "-r", str(job), "-e", SIDEKIQ_ENQUEUE],
        worker=["sidekiq", "-r", str(job), "-c", str(threads)],
        env=env,
        cwd=directory,
    )


def ceiling_system(url: str, jobs: int, threads: int) -> System:
    """The job alone: ``threads`` threads doing the ``jobs`` INCR, no queue."""
    return System(
        name=f"the job alone, {threads} thr.",
        db=2,
        enqueue=[sys.executable, "-c", ""],
        worker=[sys.executable, "-c", CEILING_WORKER, str(threads)],
        env={**os.environ, "REDIS_URL": f"{url}/2", "BENCH_JOBS": str(jobs)},
        cwd=BENCH,
    )


def sidekiq_description(system: System) -> str:
    """The line the Sidekiq enqueue prints: version, job module, how perform reaches Redis."""
    described = subprocess.run(
        [*system.enqueue[:-1], SIDEKIQ_DESCRIBE], env=system.env, cwd=system.cwd, check=True,
        timeout=STEP_TIMEOUT, capture_output=True, text=True,
    )  # fmt: skip
    return described.stdout.strip().splitlines()[-1]


def ratio(runs: list[Run], name: str, base: str, field: str) -> list[float]:
    """Per round, ``field`` of the ``name`` run over that of the ``base`` run."""
    by_round = {(run.name, run.round): getattr(run, field) for run in runs}
    return [
        by_round[(name, number)] / by_round[(base, number)]
        for (run_name, number) in by_round
        if run_name == name and (base, number) in by_round
    ]


def _enqueue_cell(value: float, ceiling: bool, width: int) -> str:
    """An enqueue figure, or ``-`` for the job alone (it has no queue to enqueue into)."""
    return f"{'-':>{width}}" if ceiling else f"{value:>{width}.2f}"


def report(runs: list[Run], names: list[str], sidekiq: str | None, ceiling: str) -> None:
    """The per-run table, the medians, then the targets and whether each is met, and
    the job alone (``ceiling``) against Sidekiq and lowkiq at batch_size 10."""
    print(
        f"{'round':>6}  {'system':<25} {'drain s':>8} {'jobs/s':>8} {'worker µs/job':>14} "
        f"{'Redis µs/job':>13} {'enq. Redis µs/job':>18}  "
        "x Sidekiq (jobs/s, worker, Redis, enq. Redis)"
    )
    for run in runs:
        versus = ""
        if sidekiq and run.name != sidekiq:
            base = next(r for r in runs if r.name == sidekiq and r.round == run.round)
            versus = (
                f"{run.rate / base.rate:.2f}x, {run.worker_us / base.worker_us:.2f}x, "
                f"{run.redis_us / base.redis_us:.2f}x"
            )
            if run.name != ceiling:
                versus += f", {run.enqueue_redis_us / base.enqueue_redis_us:.2f}x"
        print(
            f"{run.round:>6}  {run.name:<25} {run.seconds:>8.3f} {run.rate:>8,.0f} "
            f"{run.worker_us:>14.1f} {run.redis_us:>13.1f} "
            f"{_enqueue_cell(run.enqueue_redis_us, run.name == ceiling, 18)}  {versus}"
        )
    for name in [*names, ceiling]:
        mine = [run for run in runs if run.name == name]
        enqueued = statistics.median(r.enqueue_redis_us for r in mine)
        print(
            f"{'median':>6}  {name:<25} {statistics.median(r.seconds for r in mine):>8.3f} "
            f"{statistics.median(r.rate for r in mine):>8,.0f} "
            f"{statistics.median(r.worker_us for r in mine):>14.1f} "
            f"{statistics.median(r.redis_us for r in mine):>13.1f} "
            f"{_enqueue_cell(enqueued, name == ceiling, 18)}"
        )
    print("targets (median over the rounds of each round's lowkiq/Sidekiq ratio):")
    defaults, batched = names[0], names[-1]
    targets = [
        (f"{defaults}: jobs/s >= 1.5x Sidekiq's", defaults, "rate", ">=", 1.5),
        (f"{defaults}: Redis CPU per job <= Sidekiq's", defaults, "redis_us", "<=", 1.0),
        (f"{defaults}: worker CPU per job <= Sidekiq's", defaults, "worker_us", "<=", 1.0),
        (f"{batched}: jobs/s >= 2.5x Sidekiq's", batched, "rate", ">=", 2.5),
        (
            f"{defaults}: enqueue Redis CPU per job <= 2x Sidekiq's",
            defaults, "enqueue_redis_us", "<=", 2.0,
        ),
    ]  # fmt: skip
    for text, name, field, sense, bound in targets:
        if sidekiq is None:
            print(f"  {text}: not measured (no Sidekiq)")
            continue
        value = statistics.median(ratio(runs, name, sidekiq, field))
        met = value >= bound if sense == ">=" else value <= bound
        print(f"  {text}: {value:.2f}x  {'met' if met else 'NOT met'}")
    reached = statistics.median(ratio(runs, batched, ceiling, "rate"))
    print(f"{batched}: {reached:.2f}x the job alone's jobs/s (median of the rounds)", end="")
    if sidekiq is not None:
        bound = statistics.median(ratio(runs, ceiling, sidekiq, "rate"))
        print(f"; the job alone: {bound:.2f}x Sidekiq's (no Python worker of it drains more)")
    else:
        print()


def main() -> None:
    """Run the rounds and print the table, then the latencies; or, with --callgrind, count
    Redis instructions instead."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--jobs", type=int, help="jobs per run (>= 2; default 20,000, 3,000 with --callgrind)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="drain rounds (0: none)")
    parser.add_argument("--threads", type=int, default=5, help="lowkiq --threads, sidekiq -c")
    parser.add_argument("--latency-samples", type=int, default=200, help="per round (0: none)")
    parser.add_argument("--latency-rounds", type=int, default=2)
    parser.add_argument(
        "--callgrind", action="store_true", help="count Redis instructions (valgrind) instead"
    )
    parser.add_argument(
        "--redis-server",
        help="the redis-server binary (default: the embedded one, Redis 6.2)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="--callgrind: idle window, seconds"
    )
    args = parser.parse_args()
    if args.jobs is None:
        args.jobs = 3_000 if args.callgrind else 20_000
    if args.jobs < 2:
        parser.error("--jobs must be at least 2")
    if args.callgrind:
        from vs_sidekiq_callgrind import run_callgrind

        run_callgrind(args.jobs, args.threads, args.idle_seconds, args.redis_server)
        return
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-vs-sidekiq-"))
    port = free_port()
    server = start_server(directory / "redis", port=port, binary=args.redis_server)
    assert server.process is not None
    url = f"redis://127.0.0.1:{port}"
    try:
        print(machine())
        print("load average before the runs: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        print(f"Redis {server.client().info('server')['redis_version']} on 127.0.0.1:{port}")
        if args.rounds > 0:
            print(
                f"{args.jobs:,} jobs per run, each one INCR; {args.threads} threads; "
                f"logs in {directory}"
            )
        lowkiq_defaults = lowkiq_system(url, args.jobs, args.threads, 1)
        lowkiq_batched = lowkiq_system(url, args.jobs, args.threads, 10)
        print("lowkiq: perform does lowkiq.settings.client().incr(...) once per job")
        systems = [lowkiq_defaults]
        sidekiq = None
        if shutil.which("sidekiq") and shutil.which("ruby"):
            sidekiq = sidekiq_system(url, args.jobs, args.threads, directory)
            print(sidekiq_description(sidekiq))
            systems.append(sidekiq)
        else:
            print("sidekiq not on PATH (apt-get install ruby-sidekiq): lowkiq runs only")
        ceiling = ceiling_system(url, args.jobs, args.threads)
        systems += [lowkiq_batched, ceiling]
        runs = []
        for number in range(1, args.rounds + 1):
            for system in systems:
                runs.append(drain(system, url, server.process.pid, args.jobs, number, directory))
                print(f"  round {number}: {system.name}: {runs[-1].rate:,.0f} jobs/s", flush=True)
        if runs:
            names = [system.name for system in systems if system is not ceiling]
            report(runs, names, sidekiq and sidekiq.name, ceiling.name)
        if args.latency_samples > 0 and args.latency_rounds > 0:
            from vs_sidekiq_latency import report_latency, run_latency

            latencies = run_latency(
                url, sidekiq, args.latency_samples, args.latency_rounds, args.threads
            )
            report_latency(latencies, args.threads)
        print("load average after the runs: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
