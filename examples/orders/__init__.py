"""An order-status feed processed in order per order: see ``python -m examples.orders --help``."""
