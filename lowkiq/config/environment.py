"""Settings read from the environment (``LOWKIQ_*``), checked by name."""

from __future__ import annotations

import os

from lowkiq.errors import ConfigurationError


def env_int(name: str, default: int | None = None) -> int | None:
    """The integer in the environment variable ``name``, or ``default`` when unset or empty."""
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {text!r}") from None


def env_float(name: str, default: float) -> float:
    """The number in the environment variable ``name``, or ``default`` when unset or empty."""
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {text!r}") from None


def env_bool(name: str, default: bool = False) -> bool:
    """The flag in the environment variable ``name`` (1/0, true/false, yes/no), or
    ``default`` when unset or empty."""
    value = os.environ.get(name, "").strip().lower()
    if value == "":
        return default
    if value in ("0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigurationError(f"{name} must be 1 or 0, got {value!r}")
