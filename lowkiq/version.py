"""The installed lowkiq version."""

__version__ = "0.1.0"
"""The version of this lowkiq package (PEP 440)."""
