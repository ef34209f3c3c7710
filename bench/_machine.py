"""The one-line machine description the benchmarks print."""

from __future__ import annotations

import os
import platform


def machine() -> str:
    """CPU architecture, core count and Python version."""
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
