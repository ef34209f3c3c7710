"""``python -m lowkiq`` is the ``lowkiq`` command."""

from lowkiq.cli import main

main()
