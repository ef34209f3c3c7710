"""Run the orders example: a worker, the dashboard, and a burst of out-of-order updates.

    python -m examples.orders            # until Ctrl-C; dashboard on http://127.0.0.1:8000/
    python -m examples.orders --once     # exit when the burst is processed

Uses REDIS_URL, or the embedded development Redis server in ./.lowkiq/ (from
the lowkiq[embedded] extra; stop it with ``lowkiq redis stop``).  Processed
orders go to ./orders.db.  Each run starts afresh: the orders table and the jobs
still queued from an earlier run are cleared, and the figures reported are this
run's own.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from examples.orders.app import OrderWorker, connect, forget_orders
from examples.orders.feed import enqueue_burst


def lowkiq_command(*args: str) -> subprocess.Popen:
    """Start ``lowkiq ARGS`` with this Python."""
    return subprocess.Popen([sys.executable, "-m", "lowkiq", *args])


def main() -> int:
    """Start the processes, enqueue, report, and stop them cleanly."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--versions", type=int, default=6, help="status updates per order")
    parser.add_argument("--port", type=int, default=8000, help="dashboard port")
    parser.add_argument("--once", action="store_true", help="exit once the burst is processed")
    parser.add_argument("--no-web", action="store_true", help="do not start the dashboard")
    args = parser.parse_args()

    os.environ.setdefault("PYTHONPATH", os.getcwd())
    # A fresh start: no order and no queued job of an earlier run counts in this one.
    forget_orders()
    OrderWorker.actions().clear()
    processed_before = OrderWorker.metrics()["processed"]
    processes = [lowkiq_command("worker", "-r", "examples.orders.app")]
    if not args.no_web:
        processes.append(
            lowkiq_command("web", "-r", "examples.orders.app", "--port", str(args.port))
        )
        print(f"dashboard: http://127.0.0.1:{args.port}/", flush=True)
    try:
        started = time.monotonic()
        count = enqueue_burst(args.orders, args.versions)
        print(f"enqueued {count} status updates for {args.orders} orders, out of order", flush=True)
        while OrderWorker.metrics()["length"] or OrderWorker.metrics()["busy"]:
            time.sleep(0.2)
        db = connect()
        newest = db.execute("SELECT count(*) FROM orders WHERE version = ?", (args.versions,))
        stored = newest.fetchone()[0]
        db.close()
        processed = OrderWorker.metrics()["processed"] - processed_before
        print(
            f"processed in {time.monotonic() - started:.1f}s: {stored} of {args.orders} orders "
            f"in orders.db hold their newest version; {processed} "
            f"jobs processed for {count} updates (same-order updates merge)",
            flush=True,
        )
        if not args.once:
            print("running; Ctrl-C to stop", flush=True)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
