"""Redis instructions per job, lowkiq against Sidekiq, counted by valgrind (callgrind).

Run as ``python bench/vs_sidekiq.py --callgrind [--jobs 3000] [--threads 5]
[--idle-seconds 10] [--redis-server PATH]``. One private Redis (lowkiq's embedded binary,
``redis_server_binary()``, or the one ``--redis-server`` names: Debian's Redis 7 runs
lowkiq's scripts as Redis Functions) runs under ``valgrind --tool=callgrind`` on 127.0.0.1;
``callgrind_control`` zeroes its counts before each phase and dumps them after (as
bench/redis_instructions.py does, and at ``hz 1`` as there, so that the server's timer
adds little), so a figure counts only what Redis ran in that phase's window, whatever
else loads the host. The enqueue figures and Sidekiq's drain repeat within 2 % from run
to run. lowkiq's drain does not: what a worker's five threads do per job depends
on how their pops interleave, and the time-dependent background (heartbeats, lease
renewals, blocking-pop timeouts) grows with the window, which callgrind and a loaded
host stretch. Over five runs on a loaded 2-core host it went from 156,000 to 238,000 a
job (with groups 250,000 to 381,000), as the jobs one script call serves moved (0.70 to
0.92 calls a job). With ``--threads 1`` it is steadier (74,000 and 76,000 a job over
two runs, with groups 132,000 and 144,000: one thread's pop call serves 3 to 4 jobs).
Compare several runs; for the cost of the scripts alone, with the pops under control,
bench/redis_instructions.py.

Systems, each alone in its own phases, in turn: lowkiq at its defaults (5 shards,
batch_size 1, ``--threads`` threads; ``lowkiq worker -r vs_sidekiq_app``, DB 0); the
same with groups (job i in group ``g{i % 2}``: every shard holds two groups); Sidekiq
(``sidekiq -c threads``, DB 1; skipped without ``sidekiq`` on PATH: apt-get install
ruby-sidekiq). The job is vs_sidekiq.py's: one ``INCR`` inside the job. Per system:

1. The worker starts, and an enqueuer process (the system's own client, kept open:
   lowkiq ``Incr.perform_async``, Sidekiq ``Sidekiq::Client.push_bulk``) enqueues one
   warm-up job; the worker performs it (the scripts lowkiq uses are loaded then, and
   every connection is open), then stays idle.
2. idle: ``--idle-seconds`` of the warm worker waiting (heartbeats, polls, blocking-pop
   timeouts), printed per second: the background a drain's window also holds.
3. enqueue: the worker is frozen (SIGSTOP to its process group) and its blocking waits
   are ended as if timed out (``CLIENT UNBLOCK``, with what it pipelined behind them:
   lowkiq's idle pops), so that Redis hands it none of the jobs pushed; then the
   enqueuer enqueues ``--jobs`` jobs in calls of 1,000 jobs. The window counts the
   enqueue alone (before 2026-12-01 a frozen worker's wait took the first jobs pushed in
   it: Sidekiq's BRPOPs, a few thousand instructions, and lowkiq's ``BLPOP`` with the
   pops behind it, which took up to 64 jobs of each shard).
4. drain: SIGCONT; the window ends 0.5 s after the job that brings the counter to
   ``--jobs`` (so that its acknowledgement lands), with SIGSTOP.

Printed: per system the instructions per job of the enqueue and of the drain, the
drain window's seconds (callgrind slows Redis some 50-fold, a loaded host more, which
stretches the window and so its time-dependent part), the idle instructions per
second, the drain per job less the idle rate over its window ("less idle": that part
taken off, at most), each lowkiq figure over Sidekiq's; the Redis commands per job in
the drain window (INFO commandstats: the script calls and the commands they run), and
the drain's instructions per script call (how many jobs one call serves depends on
timing); lowkiq with groups over lowkiq without; the targets
(lowkiq's drain <= 2.0x Sidekiq's, its enqueue <= 5.0x). The host's floor: the job
alone, ``--jobs`` ``INCR`` from one client with no queue, the part of every drain
figure that is the job itself.

Needs ``valgrind`` and ``callgrind_control`` on PATH (apt-get install valgrind); takes
4 to 8 minutes on a loaded 2-core host.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import redis
from _machine import machine
from redis_instructions import CountedRedis
from vs_sidekiq import (
    COUNTER,
    FIRST_JOB_TIMEOUT,
    MARKS,
    SLOWEST_RATE,
    STEP_TIMEOUT,
    System,
    free_port,
    lowkiq_system,
    mark,
    sidekiq_description,
    sidekiq_system,
    stop,
)

#: Seconds a worker is left running after the last job, before it is frozen.
SETTLE = 0.5
#: Script calls per job from which the drain's instructions per script call are printed
#: (Sidekiq's scheduler runs one now and then).
MANY_SCRIPTS = 0.05
#: Jobs per enqueue call.
CALL = 1000
#: Callgrind slows Redis down: the slowest drain waited for, in jobs/s.
SLOWEST_COUNTED_RATE = SLOWEST_RATE / 40

#: lowkiq's enqueuer: argv jobs and groups (0: none); one warm-up job, "ready", then
#: on every line read the jobs in calls of CALL, and "done".
LOWKIQ_ENQUEUER = f"""
import sys
import vs_sidekiq_app
jobs, groups = int(sys.argv[1]), int(sys.argv[2])

def job(i):
    return {{"id": i, "group": f"g{{i % groups}}"}} if groups else {{"id": i}}

vs_sidekiq_app.Incr.perform_async([job(jobs)])
print("ready", flush=True)
for _ in sys.stdin:
    for start in range(0, jobs, {CALL}):
        vs_sidekiq_app.Incr.perform_async([job(i) for i in range(start, min(jobs, start + {CALL}))])
    print("done", flush=True)
"""

#: Sidekiq's enqueuer, the same steps (JOBS and IncrJob from vs_sidekiq.py's Ruby file).
SIDEKIQ_ENQUEUER = f"""
STDOUT.sync = true
Sidekiq::Client.push_bulk("class" => IncrJob, "args" => [[]])
puts "ready"
while STDIN.gets
  JOBS.times.each_slice({CALL}) do |slice|
    Sidekiq::Client.push_bulk("class" => IncrJob, "args" => slice.map {{ [] }})
  end
  puts "done"
end
"""


class CountedServer(CountedRedis):
    """Redis under callgrind on a TCP port of 127.0.0.1, for worker processes to reach."""

    def __init__(self, directory: Path, port: int, binary: str | None = None) -> None:
        super().__init__(directory, binary, port=port)
        self.port = port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``, without a DB."""
        return f"redis://127.0.0.1:{self.port}"

    def timed_count(self, phase: Callable[[], object]) -> tuple[int, float]:
        """Instructions Redis ran during ``phase()``, and the phase's seconds."""
        started = time.monotonic()
        seconds = 0.0

        def timed() -> None:
            nonlocal seconds
            phase()
            seconds = time.monotonic() - started

        return self.count(timed), seconds


@dataclass
class Counted:
    """The instructions of one system's phases."""

    name: str
    jobs: int
    enqueue: int
    drain: int
    drain_seconds: float
    idle_per_second: float
    #: Redis commands per job in the drain window, by name (INFO commandstats: the
    #: commands a script runs are counted too).
    drain_commands: dict[str, float]

    @property
    def enqueue_per_job(self) -> float:
        """Enqueue instructions per job."""
        return self.enqueue / self.jobs

    @property
    def drain_per_job(self) -> float:
        """Drain instructions per job."""
        return self.drain / self.jobs

    @property
    def drain_less_idle_per_job(self) -> float:
        """Drain instructions per job less the idle rate over the drain's window: what is
        left once the time-dependent background (which callgrind stretches) is taken off,
        at most (a busy worker skips some of what an idle one does, blocking-pop timeouts)."""
        return (self.drain - self.idle_per_second * self.drain_seconds) / self.jobs


def _line(process: subprocess.Popen[str], expected: str) -> None:
    """Read the enqueuer's next line, which must be ``expected``."""
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != expected:
        raise RuntimeError(f"the enqueuer said {line!r} (exit {process.poll()}), not {expected!r}")


def _signal(process: subprocess.Popen[bytes], number: int) -> None:
    """Send ``number`` to the process group of a worker started in a session of its own."""
    os.killpg(process.pid, number)


def unblock_all(client: redis.Redis) -> int:
    """End every blocking command waiting on the server (a frozen worker's ``BLPOP`` or
    ``BRPOP``) as if its timeout had come, and wait until the commands pipelined behind
    them ran too; returns how many were waiting.  So a frozen worker takes nothing of an
    enqueue that follows: its wait would serve the first jobs pushed (and lowkiq's, the
    pops sent behind its ``BLPOP``), drain work that the enqueue's window would count."""
    blocked = [c["id"] for c in client.client_list() if "b" in c["flags"]]
    for client_id in blocked:
        client.client_unblock(int(client_id))
    deadline = time.monotonic() + STEP_TIMEOUT
    while any("b" in c["flags"] for c in client.client_list()):
        if time.monotonic() > deadline:
            raise RuntimeError("a blocked client stayed blocked after CLIENT UNBLOCK")
        time.sleep(0.05)
    time.sleep(SETTLE)  # (the replies of what ran behind them, written to the frozen worker)
    return len(blocked)


def count_system(
    server: CountedServer,
    system: System,
    enqueuer: list[str],
    enqueuer_env: dict[str, str],
    jobs: int,
    idle_seconds: float,
    logs: Path,
) -> Counted:
    """The idle, enqueue and drain phases of one system (see the module docstring)."""
    client = redis.Redis.from_url(f"{server.url}/{system.db}", socket_timeout=STEP_TIMEOUT)
    client.flushdb()
    log = logs / f"callgrind-{re.sub(r'[^a-z0-9]+', '-', system.name.lower())}.log"
    with log.open("wb") as output:
        worker = subprocess.Popen(
            system.worker, env=system.env, cwd=system.cwd, stdout=output, stderr=output,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    errors: IO[bytes] = (logs / f"{log.stem}-enqueuer.log").open("wb")
    feeder = subprocess.Popen(
        enqueuer, env=enqueuer_env, cwd=system.cwd, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=errors, text=True,
    )  # fmt: skip
    assert feeder.stdin is not None
    try:
        _line(feeder, "ready")
        mark(client, worker, FIRST_JOB_TIMEOUT, log)  # the warm-up job performed
        time.sleep(SETTLE)
        idle, idle_for = server.timed_count(lambda: time.sleep(idle_seconds))
        client.set(COUNTER, 0)
        client.delete(MARKS)
        _signal(worker, signal.SIGSTOP)
        unblock_all(client)

        def enqueue() -> None:
            assert feeder.stdin is not None
            feeder.stdin.write("go\n")
            feeder.stdin.flush()
            _line(feeder, "done")

        enqueued = server.count(enqueue)

        def drain() -> None:
            _signal(worker, signal.SIGCONT)
            wait = max(STEP_TIMEOUT, jobs / SLOWEST_COUNTED_RATE)
            while mark(client, worker, wait, log)[0] < jobs:
                pass
            time.sleep(SETTLE)
            _signal(worker, signal.SIGSTOP)

        server.client.config_resetstat()
        drained, drain_seconds = server.timed_count(drain)
        commands = server.client.info("commandstats")
        _signal(worker, signal.SIGCONT)
        done = int(client.get(COUNTER) or 0)
        if done != jobs:
            raise RuntimeError(f"{system.name}: {done} jobs done of {jobs}")
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            _signal(worker, signal.SIGCONT)
        stop(worker)
        feeder.stdin.close()
        try:
            feeder.wait(STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            feeder.kill()
        errors.close()
    per_job = {
        name.removeprefix("cmdstat_"): stats["calls"] / jobs for name, stats in commands.items()
    }
    return Counted(system.name, jobs, enqueued, drained, drain_seconds, idle / idle_for, per_job)


def count_job_alone(server: CountedServer, jobs: int) -> int:
    """Instructions of ``jobs`` INCR from one client, no queue (DB 2)."""
    client = redis.Redis.from_url(f"{server.url}/2")
    client.flushdb()
    client.incr(COUNTER)  # connected
    return server.count(lambda: [client.incr(COUNTER) for _ in range(jobs)])


def report(counted: list[Counted], sidekiq: Counted | None, job_alone: int, jobs: int) -> None:
    """The table, the ratios and the targets."""
    print(
        f"{'system':<36} {'enqueue/job':>12} {'drain/job':>10} {'drain s':>8} {'idle/s':>10} "
        f"{'less idle':>10}  x Sidekiq (enqueue, drain, less idle)"
    )
    for row in counted:
        versus = ""
        if sidekiq is not None and row is not sidekiq:
            versus = (
                f"{row.enqueue_per_job / sidekiq.enqueue_per_job:.2f}x, "
                f"{row.drain_per_job / sidekiq.drain_per_job:.2f}x, "
                f"{row.drain_less_idle_per_job / sidekiq.drain_less_idle_per_job:.2f}x"
            )
        print(
            f"{row.name:<36} {row.enqueue_per_job:>12,.0f} {row.drain_per_job:>10,.0f} "
            f"{row.drain_seconds:>8.1f} {row.idle_per_second:>10,.0f} "
            f"{row.drain_less_idle_per_job:>10,.0f}  {versus}"
        )
    print(
        f"{'the job alone (INCR, no queue)':<36} {'-':>12} {job_alone / jobs:>10,.0f}"
        "  (the floor of every drain figure)"
    )
    print(
        "Redis commands per job in the drain window (INFO commandstats, a script's own included):"
    )
    for row in counted:
        busiest = sorted(row.drain_commands.items(), key=lambda item: -item[1])[:10]
        listed = ", ".join(f"{name} {calls:.2f}" for name, calls in busiest if calls >= 0.005)
        # EVALSHA on Redis 6.2, FCALL (lowkiq's Redis Functions) on Redis 7.
        scripts = row.drain_commands.get("evalsha", 0.0) + row.drain_commands.get("fcall", 0.0)
        if scripts >= MANY_SCRIPTS:
            listed += f"; {row.drain_per_job / scripts:,.0f} instructions per script call"
        print(f"  {row.name}: {listed}")
    plain, grouped = counted[0], counted[1]
    print(
        f"{grouped.name} / {plain.name}: enqueue "
        f"{grouped.enqueue_per_job / plain.enqueue_per_job:.2f}x, drain "
        f"{grouped.drain_per_job / plain.drain_per_job:.2f}x"
    )
    print("targets:")
    for text, mine, theirs, bound in [
        ("drain instructions", plain.drain_per_job, "drain_per_job", 2.0),
        ("enqueue instructions", plain.enqueue_per_job, "enqueue_per_job", 5.0),
    ]:
        if sidekiq is None:
            print(f"  {plain.name}: {text} <= {bound:.1f}x Sidekiq's: not measured (no Sidekiq)")
            continue
        value = mine / getattr(sidekiq, theirs)
        print(
            f"  {plain.name}: {text} <= {bound:.1f}x Sidekiq's: {value:.2f}x  "
            f"{'met' if value <= bound else 'NOT met'}"
        )


def run_callgrind(jobs: int, threads: int, idle_seconds: float, binary: str | None = None) -> None:
    """Count every system's phases and print the report (on the ``redis-server`` at
    ``binary``; default: ``redis_server_binary()``)."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"{' and '.join(missing)} not on PATH (apt-get install valgrind)")
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-vs-sidekiq-callgrind-"))
    (directory / "redis").mkdir()
    server = CountedServer(directory / "redis", free_port(), binary)
    try:
        print(machine())
        version = server.client.info("server")["redis_version"]
        print(
            f"Redis {version} under callgrind on {server.url}; {jobs:,} jobs, each one INCR; "
            f"enqueue in calls of {CALL:,}; {threads} threads; logs in {directory}"
        )
        plain = lowkiq_system(server.url, jobs, threads, 1)
        grouped = lowkiq_system(server.url, jobs, threads, 1)
        grouped.name = f"{plain.name}, 2 groups"
        # A push of 1,000 jobs may take longer than redis-py's default socket_timeout
        # (5 s) under callgrind.
        patient = {
            **plain.env,
            "REDIS_URL": f"{plain.env['REDIS_URL']}?socket_timeout={STEP_TIMEOUT:g}",
        }
        runs = [
            (plain, [sys.executable, "-c", LOWKIQ_ENQUEUER, str(jobs), "0"], patient),
            (grouped, [sys.executable, "-c", LOWKIQ_ENQUEUER, str(jobs), "2"], patient),
        ]
        if shutil.which("sidekiq") and shutil.which("ruby"):
            sidekiq = sidekiq_system(server.url, jobs, threads, directory)
            print(sidekiq_description(sidekiq))
            runs.append((sidekiq, [*sidekiq.enqueue[:-1], SIDEKIQ_ENQUEUER], sidekiq.env))
        else:
            print("sidekiq not on PATH (apt-get install ruby-sidekiq): lowkiq only")
        counted = []
        for system, enqueuer, env in runs:
            counted.append(
                count_system(server, system, enqueuer, env, jobs, idle_seconds, directory)
            )
            print(f"  {system.name}: counted", flush=True)
        job_alone = count_job_alone(server, jobs)
        sidekiq_row = counted[2] if len(counted) > 2 else None
        report(counted, sidekiq_row, job_alone, jobs)
    finally:
        server.stop()
