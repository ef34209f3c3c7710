"""A griffe extension for the API reference: Sphinx roles in docstrings become code.

The docstrings cite objects the Sphinx way (``:class:`Worker```); the site renders
docstrings as Markdown, where such a role would show as written. This turns
``:role:`target``` (and ``:role:`~a.b.target```) into ``target`` in backticks.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?[a-z]+:`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring's Sphinx roles as inline code when griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring, when it has one."""
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(lambda m: f"`{m.group(1)}`", obj.docstring.value)
