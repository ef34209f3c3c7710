"""A throwaway PostgreSQL cluster for the tests: ``initdb`` in a temporary directory and
``pg_ctl start`` on a free port, as the ``postgres`` user when the tests run as root."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.health.probe import free_ports


def postgres_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's
    ``/usr/lib/postgresql/<version>/bin``; ``None`` when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(directory, "initdb"), os.X_OK):
            return Path(directory)
    return None


@dataclass
class Cluster:
    """A running cluster: ``host:port``, its data directory and binaries."""

    address: str
    directory: Path
    bin: Path
    user: str | None

    def stop(self) -> None:
        """Stop it at once and delete its files."""
        _run(self.user, [str(self.bin / "pg_ctl"), "-D", str(self.directory / "data"),
                         "stop", "-m", "immediate", "-w"], check=False)  # fmt: skip
        shutil.rmtree(self.directory, ignore_errors=True)


def _run(user: str | None, command: list[str], check: bool = True) -> None:
    """Run ``command`` as ``user`` (``None``: as this process), from a directory every user
    may enter (the checkout may be under root's home)."""
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    subprocess.run(command, check=check, capture_output=True, timeout=120, cwd="/")


def start_cluster() -> Cluster | str:
    """A started cluster, or why none could be started."""
    binaries = postgres_bin()
    if binaries is None:
        return "PostgreSQL is not installed (no initdb on PATH nor in /usr/lib/postgresql)"
    user = None
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-pg-"))
    if os.geteuid() == 0:  # initdb refuses to run as root
        user = "postgres"
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            return "running as root and there is no postgres user to run PostgreSQL as"
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    port = free_ports()
    data = directory / "data"
    try:
        _run(user, [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                    "--no-sync", "-E", "UTF8"])  # fmt: skip
        options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        _run(user, [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                    str(directory / "log"), "-w", "start"])  # fmt: skip
    except (subprocess.CalledProcessError, OSError) as exc:
        log = directory / "log"
        detail = log.read_text()[-2000:] if log.exists() else getattr(exc, "stderr", b"")
        shutil.rmtree(directory, ignore_errors=True)
        return f"PostgreSQL did not start: {exc}: {detail!r}"
    return Cluster(f"127.0.0.1:{port}", directory, binaries, user)
