#!/usr/bin/env python
"""The example project's ``manage.py``: ``migrate``, ``place_orders 10``,
``lowkiq_worker``, ``runserver``..."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The repository's root, so that ``examples.django_app`` imports from a checkout.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
