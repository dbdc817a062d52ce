"""A real PostgreSQL server for the tests, started from the binaries on the machine.

`initdb` and `pg_ctl` (Debian's `postgresql` package puts them under
`/usr/lib/postgresql/<version>/bin`; `.ci/run` installs it when it is missing)
make a cluster in a temporary directory that listens on a Unix socket only.
`initdb` refuses to run as root, so as root the cluster belongs to the
`postgres` user and the commands run through `runuser`. Each test gets a
database of its own (`Server.database`), dropped with the server.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def binaries() -> Path | None:
    """The directory holding `initdb` and `pg_ctl`, or None if PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(versions[0]).parent if versions else None


class Server:
    """One PostgreSQL cluster in a temporary directory, on a Unix socket."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="fusee-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self.port = 5432 + os.getpid() % 20000  # the socket file is per directory anyway
        self._as_postgres = os.geteuid() == 0
        self._names = itertools.count(1)

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip() or done.stdout}")

    def start(self) -> None:
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",  # the cluster's own files; its WAL is still synced at each COMMIT
            "-E",
            "UTF8",
        )
        options = (
            f"-k {self.socket_dir} -p {self.port} -c listen_addresses='' -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def database(self) -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def journal_payloads(url: str) -> list[bytes]:
    """Every record payload the journal in `url` keeps, in lsn order (opened as its
    owner would, so a gap is `JournalCorrupt`)."""
    from fusee_runtime.store.postgres import PgJournal

    pg = PgJournal(url)
    pg.open()
    try:
        return [payload for _, payload in pg.records()]
    finally:
        pg.close()


def skip_reason() -> str | None:
    """Why a test needing PostgreSQL cannot run here (None: it can)."""
    if binaries() is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


def require() -> None:
    """Skips the calling test where PostgreSQL cannot run; in CI, where `.ci/run`
    installs it, fails instead."""
    reason = skip_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
