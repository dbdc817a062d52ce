"""`fusee serve --store URL` children for the PostgreSQL takeover tests."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from collections import defaultdict
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


class Ledger:
    """The side ledger of `takeover_app`: every step execution, by idempotency key."""

    def __init__(self, path: Path) -> None:
        self.executions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for line in path.read_bytes().splitlines():
            entry = orjson.loads(line)
            self.executions[entry["key"]].append(entry)
        self.key_of = {e["nonce"]: key for key, runs in self.executions.items() for e in runs}

    def check_none_ran_again(self, recorded: list[str]) -> None:
        """Each step result the journals recorded (its nonce) is of the last execution of
        its step: once committed, never again; and each step ran at most twice."""
        for nonce in recorded:
            runs = self.executions[self.key_of[nonce]]
            assert runs[-1]["nonce"] == nonce, runs
            assert len(runs) <= 2, runs

    def ran_again(self) -> int:
        return sum(len(runs) - 1 for runs in self.executions.values())


def step_nonces(records: list[dict[str, Any]]) -> list[str]:
    """The nonces of the step results in a run's history (as the API gives it)."""
    return [r["value"]["nonce"] for r in records if r["type"] == "StepCompleted"]
