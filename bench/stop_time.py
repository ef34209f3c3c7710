"""How long an idle `lowkiq worker` takes to exit after TERM: from the signal to the
"stopped" line, and to the process's exit (what a deploy waits for).

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/stop_time.py [--rounds 5] [--settle 3]
(``--settle``: seconds the worker runs idle, once it serves its shards, before the TERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _machine import machine

from lowkiq.clients.embedded import start_server

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "bench" / "blank_app.py"


def one_stop(url: str, settle: float) -> tuple[float, float]:
    """Seconds from TERM to the "stopped" line, and to the exit, of one idle worker."""
    process = subprocess.Popen(
        [sys.executable, "-m", "lowkiq", "worker", "-r", str(APP)],
        env={**os.environ, "REDIS_URL": url},
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stderr is not None
    stderr = process.stderr
    stopped_at: list[float] = []
    serving = threading.Event()

    def read() -> None:
        for line in stderr:
            if " threads serve " in line:
                serving.set()
            if line.rstrip().endswith("lowkiq.server: stopped"):
                stopped_at.append(time.monotonic())

    reader = threading.Thread(target=read)
    reader.start()
    if not serving.wait(60):
        process.kill()
        raise SystemExit("the worker did not start within 60 s")
    time.sleep(settle)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    exited = time.monotonic()
    reader.join()
    if process.returncode != 0 or not stopped_at:
        raise SystemExit(f"the worker exited {process.returncode} without logging 'stopped'")
    return stopped_at[0] - sent, exited - sent


def main() -> None:
    """Print the median and the slowest of each figure over ``--rounds`` stops."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, default=3.0)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(directory)
        try:
            stops = [one_stop(server.url, args.settle) for _ in range(args.rounds)]
        finally:
            server.stop()
    for name, values in (("TERM -> 'stopped'", [s for s, _ in stops]),
                         ("TERM -> exit", [e for _, e in stops])):  # fmt: skip
        print(
            f"{name}: median {statistics.median(values) * 1000:.0f} ms, "
            f"slowest {max(values) * 1000:.0f} ms ({len(values)} stops)"
        )


if __name__ == "__main__":
    main()
