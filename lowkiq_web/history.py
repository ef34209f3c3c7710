"""The History page (every worker's stored history over 1 h / 8 h / 72 h) and a worker's
Charts page (one worker's in detail: throughput and failures over time, perform time and
queue wait quantiles and histograms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import render_template, request

import lowkiq
from lowkiq_web import history_charts
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter
from lowkiq_web.overview import find_worker


@dataclass(frozen=True)
class Window:
    """A span of history the page offers: its name, minutes, and minutes per chart point."""

    name: str
    minutes: int
    step: int


#: The windows offered, the first being the default.
WINDOWS = (Window("1h", 60, 1), Window("8h", 480, 10), Window("72h", 4320, 60))
#: The quantiles shown.
QUANTILES = (0.5, 0.95, 0.99)


def parse_window(args: Any) -> Window:
    """The ``window`` parameter (``1h``, ``8h``, ``72h``), checked."""
    text = args.get("window") or WINDOWS[0].name
    for window in WINDOWS:
        if window.name == text:
            return window
    names = ", ".join(window.name for window in WINDOWS)
    raise BadParameter(f"window must be one of {names}, got {text!r}")


def _common(window: Window) -> dict[str, Any]:
    return {"window": window, "windows": WINDOWS, "quantiles": QUANTILES}


@lowkiq_web.get("/history")
def history_index() -> str:
    """Every worker's totals, rates and quantiles over the window, and their joint throughput."""
    window = parse_window(request.args)
    histories = lowkiq.history(window.minutes)
    spans = lowkiq.History.merged(list(histories.values())).series(window.step) if histories else []
    return render_template(
        "lowkiq/history_index.html",
        totals={name: history.total for name, history in histories.items()},
        chart=history_charts.throughput(spans),
        **_common(window),
    )


@lowkiq_web.get("/<worker>/history")
def worker_history(worker: str) -> str:
    """One worker's throughput, failures, perform time and queue wait over the window."""
    found = find_worker(worker)
    window = parse_window(request.args)
    history = lowkiq.history(window.minutes, [found.__name__])[found.__name__]
    total = history.total
    return render_template(
        "lowkiq/history.html",
        worker=found.__name__,
        kind="history",
        metrics=found.metrics(),
        total=total,
        chart=history_charts.throughput(history.series(window.step)),
        durations=history_charts.histogram(total.duration_buckets),
        waits=history_charts.histogram(total.wait_buckets),
        **_common(window),
    )
