"""`fusee serve --store URL` children for the PostgreSQL takeover tests."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import orjson
from processes import REPO, fusee_script


class Worker:
    """One `fusee serve` child and the events it prints (JSON lines)."""

    def __init__(
        self,
        home: Path,
        store: str,
        env: dict[str, str],
        args: tuple[str, ...] = ("--app", "takeover_app", "--http", "127.0.0.1:0"),
    ) -> None:
        command = [fusee_script(), "--store", store, "serve", "--home", str(home), *args]
        self.stderr = home.with_name(home.name + ".err")
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        # The one reader of its stdout, to the end (so nothing else may read or close it).
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL if it hangs; then its stdout is closed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # not an assertion: a stuck child must not hang
            self.proc.kill()
            self.proc.wait()
        self._reader.join()
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(orjson.loads(line))
        self.events.put(None)

    def next_event(self) -> dict[str, Any]:
        """The next event but log lines (the first open's "tables at version 1", say)."""
        while True:
            event = self.events.get()
            if event is None:
                code = self.proc.wait()
                err = self.stderr.read_text(errors="replace")
                raise AssertionError(f"worker {self.proc.pid} exited {code}: {err}")
            if event["event"] != "log":
                return event
