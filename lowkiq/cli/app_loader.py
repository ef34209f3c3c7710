"""Import the app given to ``lowkiq worker -r``: a ``.py`` file or a dotted module name."""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path
from types import ModuleType

from lowkiq.errors import LowkiqError


class AppLoadError(LowkiqError):
    """The app file or module is missing or raised while being imported."""


def module_name_of(path: Path) -> tuple[Path, str]:
    """The directory to put on ``sys.path`` and the dotted name that imports ``path``.

    A file inside packages (folders with ``__init__.py``) is imported under its
    full dotted name, so ``examples/orders/app.py`` is ``examples.orders.app``.
    """
    parts = [path.stem]
    root = path.parent
    while (root / "__init__.py").exists() and root.parent != root:
        parts.insert(0, root.name)
        root = root.parent
    return root, ".".join(parts)


def _where(exc: BaseException, origin: str) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{exc.filename or origin}, line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    if not frames:
        return origin
    frame = frames[-1]
    return f"{frame.filename}, line {frame.lineno}"


def load_app(target: str) -> ModuleType:
    """Import ``target`` (a path to a ``.py`` file, or a module name) and return the module."""
    path = Path(target)
    is_file = target.endswith(".py") or "/" in target or path.is_file()
    if is_file:
        if not path.is_file():
            raise AppLoadError(f"cannot load app {target!r}: no such file")
        root, name = module_name_of(path.resolve())
        sys.path.insert(0, str(root))
    else:
        name = target
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not is_file and exc.name and name.startswith(exc.name):
            raise AppLoadError(
                f"cannot load app {target!r}: no module named {exc.name!r}"
            ) from None
        raise AppLoadError(
            f"cannot load app {target!r}: {type(exc).__name__}: {exc} ({_where(exc, target)})"
        ) from None
    except Exception as exc:
        raise AppLoadError(
            f"cannot load app {target!r}: {type(exc).__name__}: {exc} ({_where(exc, target)})"
        ) from None
