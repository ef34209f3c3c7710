"""Idle enqueue -> perform latency of lowkiq and Sidekiq, side by side in one run.

Part of bench/vs_sidekiq.py (which runs it after the drains; ``--rounds 0`` runs only
this). Each round measures lowkiq, then Sidekiq, then the host's floor, ``samples``
times each: 20 ms after the previous sample (every worker thread idle again) the
enqueuer notes the time and enqueues one job; the job notes the time its perform
started in ``bench:starts``; the enqueuer BLPOPs it and takes the difference. Both
times are on one clock, CLOCK_MONOTONIC of this host (Python's ``time.perf_counter``,
Ruby's ``Process.clock_gettime(Process::CLOCK_MONOTONIC)``), so no clock skew enters.

* lowkiq: bench/latency.py's worker process (a ``Server`` at ``threads`` threads, 5
  shards, batch_size 1) and its ``Timed`` job; the enqueuer is this process
  (``Timed.perform_async``), on DB 0.
* Sidekiq: ``sidekiq -c threads`` on the ``StartJob`` of vs_sidekiq.py's Ruby file;
  the enqueuer is a Ruby process (``Sidekiq::Client.push``), on DB 1.
* floor: a bare ``RPUSH`` waking a ``BLPOP`` in another process (bench/latency.py), no
  queue in between: no system can do better on this host.

The figures move with the host's load (2 cores shared here): compare the two systems
of the same run, not runs of different times.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

import redis
from latency import measure, measure_floor, percentiles
from vs_sidekiq import FIRST_JOB_TIMEOUT, System, stop

#: The Ruby enqueuer: a warm-up job (the worker may still be booting), then ARGV[0]
#: samples, one per line, in milliseconds.
SIDEKIQ_LATENCY = """
STDOUT.sync = true
samples = Integer(ARGV[0])
starts = Redis.new(url: ENV.fetch("REDIS_URL"))
starts.del("bench:starts")
Sidekiq::Client.push("class" => StartJob, "args" => [])
starts.blpop("bench:starts", timeout: Integer(ARGV[1])) or abort("no warm-up job performed")
samples.times do
  sleep 0.02
  sent = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  Sidekiq::Client.push("class" => StartJob, "args" => [])
  reply = starts.blpop("bench:starts", timeout: 5) or abort("a job was not performed within 5 s")
  puts((Float(reply[1]) - sent) * 1000)
end
"""


@dataclass
class Latencies:
    """Milliseconds from enqueue to perform start, per system, per round."""

    rounds: dict[str, list[list[float]]] = field(default_factory=dict)

    def add(self, name: str, samples: list[float]) -> None:
        """One round's samples of ``name``."""
        self.rounds.setdefault(name, []).append(samples)

    def all(self, name: str) -> list[float]:
        """Every sample of ``name``."""
        return [sample for samples in self.rounds[name] for sample in samples]


def sidekiq_samples(system: System, samples: int) -> list[float]:
    """Start ``sidekiq -c``, measure ``samples`` idle enqueue -> perform latencies with
    the Ruby enqueuer, stop it."""
    with open(system.cwd / "sidekiq-latency.log", "ab") as log:
        worker = subprocess.Popen(
            system.worker, env=system.env, cwd=system.cwd, stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        measured = subprocess.run(
            [*system.enqueue[:-1], SIDEKIQ_LATENCY, str(samples), str(int(FIRST_JOB_TIMEOUT))],
            env=system.env, cwd=system.cwd, check=True, capture_output=True, text=True,
            timeout=FIRST_JOB_TIMEOUT + samples,
        )  # fmt: skip
    finally:
        stop(worker)
    return [float(line) for line in measured.stdout.split()]


def run_latency(
    url: str, sidekiq: System | None, samples: int, rounds: int, threads: int
) -> Latencies:
    """``rounds`` rounds of ``samples`` samples: lowkiq, Sidekiq (when given), the floor."""
    latencies = Latencies()
    for number in range(1, rounds + 1):
        for db in (0, 1):
            redis.Redis.from_url(f"{url}/{db}").flushdb()
        lowkiq_samples, _ = measure(f"{url}/0", samples, 0, threads, 5)
        latencies.add("lowkiq", lowkiq_samples)
        if sidekiq is not None:
            latencies.add("Sidekiq", sidekiq_samples(sidekiq, samples))
        latencies.add("floor", measure_floor(f"{url}/2", samples))
        medians = ", ".join(
            f"{name} p50 {percentiles(rounds_of[-1])[0]:.2f} ms"
            for name, rounds_of in latencies.rounds.items()
        )
        print(f"  latency round {number}: {medians}", flush=True)
    return latencies


def report_latency(latencies: Latencies, threads: int) -> None:
    """p50 / p99 / max per system and round and over every round, the lowkiq/Sidekiq
    ratios, and the targets."""
    print(
        f"idle enqueue -> perform start, ms ({threads} threads; one clock, CLOCK_MONOTONIC; "
        "noisy on a shared host):"
    )
    print(f"  {'system':<8} {'round':>5} {'samples':>7} {'p50':>7} {'p99':>7} {'max':>7}")
    for name, rounds_of in latencies.rounds.items():
        for number, samples in [*enumerate(rounds_of, 1), ("all", latencies.all(name))]:
            p50, p99, worst = percentiles(samples)
            print(
                f"  {name:<8} {number:>5} {len(samples):>7} {p50:>7.2f} {p99:>7.2f} {worst:>7.2f}"
            )
    if "Sidekiq" not in latencies.rounds:
        print("  targets: not measured (no Sidekiq)")
        return
    mine, theirs = percentiles(latencies.all("lowkiq")), percentiles(latencies.all("Sidekiq"))
    print(
        f"  lowkiq/Sidekiq: p50 {mine[0] / theirs[0]:.2f}x, p99 {mine[1] / theirs[1]:.2f}x "
        f"(floor p50 {percentiles(latencies.all('floor'))[0]:.2f} ms)"
    )
    p99_bound = max(2.0, 1.5 * theirs[1])
    print(
        f"  target lowkiq p50 <= Sidekiq's p50 ({theirs[0]:.2f} ms): {mine[0]:.2f} ms  "
        f"{'met' if mine[0] <= theirs[0] else 'NOT met'}"
    )
    print(
        f"  target lowkiq p99 <= max(2 ms, 1.5x Sidekiq's p99) ({p99_bound:.2f} ms): "
        f"{mine[1]:.2f} ms  {'met' if mine[1] <= p99_bound else 'NOT met'}"
    )
