"""`fusee serve --store URL` children for the PostgreSQL takeover tests."""

from __future__ import annotations

import os
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

    def check_finished(
        self, results: dict[int, Any], histories: dict[int, list[dict[str, Any]]], steps: int
    ) -> dict[int, list[str]]:
        """`takeover` runs t-0... (`steps` steps, "go" 100 + i, `steps` more, "end" 1000 + i)
        all finished with their results and every step recorded once: as many step
        results as executions, none run again once committed. Returns the nonces each
        run recorded."""
        done = sum(range(2 * steps))
        assert results == {i: done + 100 + i + 1000 + i for i in range(len(results))}
        recorded = {i: step_nonces(records) for i, records in histories.items()}
        assert sum(map(len, recorded.values())) == len(self.executions) == len(results) * 2 * steps
        self.check_none_ran_again([n for nonces in recorded.values() for n in nonces])
        return recorded


def step_nonces(records: list[dict[str, Any]]) -> list[str]:
    """The nonces of the step results in a run's history (as the API gives it)."""
    return [r["value"]["nonce"] for r in records if r["type"] == "StepCompleted"]


APP_DIR = Path(__file__).resolve().parent / "postgres" / "takeover"


class Progress:
    """What the takeover tests share with `takeover_app`'s workers: the side ledger, a
    FIFO of hints that steps ran, and the workers' environment (the app on its path)."""

    def __init__(self, tmp_path: Path) -> None:
        self.ledger = tmp_path / "ledger.jsonl"
        fifo = tmp_path / "progress"
        os.mkfifo(fifo)
        # Held open for reading and writing: the steps' writes never fail for want of a reader.
        self._hint = os.open(fifo, os.O_RDWR)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
        path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
        env.update(PYTHONPATH=path, TAKEOVER_LEDGER=str(self.ledger), TAKEOVER_PROGRESS=str(fifo))
        self.env = env

    def wait_for_steps(self, count: int) -> None:
        """Returns once `count` step executions have begun."""
        seen = 0
        with os.fdopen(os.dup(self._hint), "rb", buffering=0) as hints:
            while seen < count:
                seen += hints.read(65536).count(b"\n")

    def close(self) -> None:
        os.close(self._hint)


def merged_events(workers: list[Worker]) -> queue.Queue[tuple[Worker, dict[str, Any]]]:
    """Every worker's events in one queue, as they come."""
    merged: queue.Queue[tuple[Worker, dict[str, Any]]] = queue.Queue()

    def forward(worker: Worker) -> None:
        while True:
            try:
                merged.put((worker, worker.next_event()))
            except AssertionError as e:  # it exited: said to whoever waits on the queue
                merged.put((worker, {"event": "exited", "error": str(e)}))
                return

    for worker in workers:
        threading.Thread(target=forward, args=(worker,), daemon=True).start()
    return merged


def next_event(events: queue.Queue[tuple[Worker, dict[str, Any]]]) -> tuple[Worker, dict[str, Any]]:
    worker, event = events.get()
    if event["event"] == "exited" and worker.proc.returncode != -signal.SIGKILL:
        raise AssertionError(event["error"])
    return worker, event


def until_balanced(
    events: queue.Queue[tuple[Worker, dict[str, Any]]], held: dict[Worker, set[int]], shards: int
) -> None:
    """Follows the workers' takes and gives (into `held`) until each drives its fair
    share of the `shards` journals, and every journal is driven."""
    share = -(-shards // len(held))
    while not (
        all(share - 1 <= len(mine) <= share for mine in held.values())
        and set().union(*held.values()) == set(range(shards))
    ):
        worker, event = next_event(events)
        if event["event"] == "shard_taken":
            held[worker].add(event["shard"])
        elif event["event"] == "shard_given":
            held[worker].discard(event["shard"])
