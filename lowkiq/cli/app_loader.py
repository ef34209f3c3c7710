"""Import the app given to ``lowkiq worker -r``: a ``.py`` file or a dotted module name."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType

from lowkiq.errors import LowkiqError


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


#: The environment variable every command that loads an app reads when ``-r`` is not given.
APP_ENV = "LOWKIQ_APP"


class AppLoadError(LowkiqError):
    """The app file or module is missing or raised while being imported."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        #: What the app raised, with its traceback (``None``: nothing raised, e.g. no file).
        self.cause = cause

    def traceback_text(self) -> str:
        """The traceback of what the app raised, without the import machinery's frames;
        empty when nothing raised."""
        if self.cause is None:
            return ""
        shown = traceback.TracebackException.from_exception(self.cause)
        shown.stack = traceback.StackSummary.from_list(
            [
                frame
                for frame in shown.stack
                if frame.filename != __file__ and not _is_import_machinery(frame.filename)
            ]
        )
        return "".join(shown.format())


def _is_import_machinery(filename: str) -> bool:
    return "importlib" in filename and (filename.startswith("<") or "/importlib/" in filename)


def _library_dirs() -> tuple[str, ...]:
    """The folders of code that is not the user's: the standard library, installed
    packages and lowkiq itself."""
    paths = sysconfig.get_paths()
    found = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    found.add(str(Path(__file__).resolve().parents[1]))
    return tuple(os.path.join(os.path.realpath(folder), "") for folder in found)


def _is_library(filename: str, dirs: tuple[str, ...]) -> bool:
    return filename.startswith("<") or os.path.realpath(filename).startswith(dirs)


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The frame of the user's code where ``exc`` was raised: the innermost frame outside
    the standard library, installed packages, lowkiq and the import machinery (a
    ``KeyError`` from ``os.environ[...]`` is named at the app's line, not at
    ``<frozen os>``); else the innermost frame outside the import machinery."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not _is_import_machinery(frame.filename)
    ]
    dirs = _library_dirs()
    own = [frame for frame in frames if not _is_library(frame.filename, dirs)]
    found = own or frames
    return found[-1] if found else None


def _where(exc: BaseException, origin: str) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{exc.filename or origin}, line {exc.lineno}"
    frame = user_frame(exc)
    if frame is None:
        return origin
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
        raise _raised(target, exc) from None
    except Exception as exc:
        raise _raised(target, exc) from None


def _raised(target: str, exc: BaseException) -> AppLoadError:
    """The error of an app that raised ``exc`` while being imported: one line naming the
    user's file and line, and ``exc`` with its traceback."""
    return AppLoadError(
        f"cannot load app {target!r}: {type(exc).__name__}: {exc} ({_where(exc, target)})", exc
    )
