"""Running a child process that owns a home, and reading what it left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import decode
from fusee_runtime.journal.storage import Storage

HERE = Path(__file__).parent


class Child:
    """One life of a child process; its stdout is read line by line."""

    def __init__(
        self,
        home: Path,
        ledger: Path,
        crash_at: str | None = None,
        script: str = "child.py",
        args: tuple[str, ...] = ("wf-1", "5"),
        **env: str,
    ) -> None:
        full_env = {k: v for k, v in os.environ.items() if k != "CRASH_AT"}
        full_env.update(LEDGER=str(ledger), **env)
        if crash_at:
            full_env["CRASH_AT"] = crash_at
        self.lines: list[str] = []
        self.stderr_path = ledger.with_name(f"child-{len(list(ledger.parent.glob('child-*')))}.err")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE / script), str(home), *args],
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def read_until(self, prefix: str) -> str:
        """Reads the child's stdout until a line starting with `prefix` (seen before, or next)."""
        for line in self.lines:
            if line.startswith(prefix):
                return line
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        self.proc.wait()
        self.proc.stdout.close()
        err = self.stderr_path.read_text()
        raise AssertionError(f"child ended before {prefix!r}; stdout={self.lines} stderr={err}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert self.proc.returncode == -signal.SIGKILL

    def finish(self, prefix: str = "RESULT ") -> Any:
        """Waits for the line starting with `prefix` and a clean exit; returns its JSON."""
        line = self.read_until(prefix)
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert self.proc.returncode == 0, self.stderr_path.read_text()
        return orjson.loads(line.removeprefix(prefix))


def entries(ledger: Path) -> list[dict[str, Any]]:
    """The ledger's entries: each a flat JSON object, written by one O_APPEND write.

    A SIGKILL can cut such a write short where it crosses a page of the file (the
    kernel checks for a fatal signal between pages), and the next process's entry
    then follows the torn one on the same line. The torn entry is of a step that never
    returned, so nothing recorded it: it is skipped, and the entries around it kept.
    """
    if not ledger.exists():
        return []
    return [orjson.loads(entry) for entry in _ENTRY.findall(ledger.read_bytes())]


_ENTRY = re.compile(rb"\{[^{}]*\}")
"""One whole entry (the ledger's objects hold no nested object)."""


def calls(ledger: Path, step: str) -> list[dict[str, Any]]:
    return [e for e in entries(ledger) if e["step"] == step]


def journal(home: Path) -> list[list[Any]]:
    """The records the children left: in the home's journal, or in the PostgreSQL
    database `FUSEE_STORE` names (the store the children were given too)."""
    store = os.environ.get("FUSEE_STORE")
    if store:
        from postgres_server import journal_payloads

        payloads = journal_payloads(store)
    else:
        payloads = [p for _, p in recover(home / "journal", Storage(), repair=False).records]
    return [decode(p) for p in payloads]
