"""A child process for the storage-lifecycle crash tests: a stream of short runs on a
home with tiny sizes, so checkpoints, compaction and moves to the history store
happen all the time, killed by itself with SIGKILL at a chosen point.

Usage: python storage_child.py HOME POINT NTH FIRST  (env LEDGER)

POINT is one of `POINTS` (or `none`: run until the parent kills it); the child
kills itself at the NTH time it reaches that point. Its runs are `s<FIRST>`,
`s<FIRST+1>`, ... (a later life on the same home starts runs of its own, and
drives the earlier ones it finds open). It prints, one line per write(2):

- `STARTED <id>` once a start is durable;
- `PARKED <id>` once a waiting run waits with everything it recorded durable
  (its first step's result among them), before its signal is sent;
- `SIGNALED <id> <value>` once `engine.signal` returned;
- `RESULT <id> <json>` for each result `handle.result()` returned;
- `KILL <point> <json>` just before it kills itself (the json says what the
  point was doing: the checkpoint's path, the segment removed, the run ids of
  the history batch);
- `DONE` if it ran out of work first (then it exits without closing).

The workflows live here too, so the parent registers the same ones when it
reopens the home. Each step execution appends a line to the ledger (its run,
step name, `ctx.key()`, a fresh nonce and the pid) and returns the nonce, so
the journal's recorded nonce names the execution whose result was durable.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import Config, Ctx, Engine, current_ctx, workflow
from fusee_runtime.journal.storage import Storage
from fusee_runtime.store.sqlite_history import SqliteHistory

CONFIG = Config(
    segment_bytes=64 << 10, payload_bytes_max=8 << 10, checkpoint_bytes=16 << 10, control=False
)
"""Tiny sizes: a checkpoint every few dozen runs, a new segment every few checkpoints."""

POINTS = (
    "ckpt-tmp-mid",  # half of a checkpoint's .tmp written (not synced)
    "ckpt-before-rename",  # the .tmp whole and fsynced, not yet renamed
    "ckpt-after-rename",  # renamed into place, the directory not yet fsynced
    "compact-before-remove",  # old checkpoints removed, no segment yet
    "compact-after-remove",  # the first segment of a compaction removed
    "history-before-commit",  # a batch's rows inserted, not committed
    "history-after-commit",  # committed, memory not yet told (`on_stored`)
)

RUNS = 2000
"""An upper bound: every point is reached long before (a run takes a few records)."""
CHAINS = 6
"""Runs started at once (each chain starts its next run when its short one ends)."""
OPEN_WAITERS = 12
"""Waiting runs left open at any time: each checkpoint holds some open work."""

LEDGER: str | None = None
"""The ledger's path, set by whoever runs the workflows (the child, then the parent)."""
REACHED: collections.Counter[str] = collections.Counter()
"""How often each point was reached (printed with `DONE`)."""


def emit(*words: object) -> None:
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


def signal_value(workflow_id: str) -> int:
    return sum(map(ord, workflow_id)) % 97


def is_waiter(workflow_id: str) -> bool:
    return int(workflow_id.removeprefix("s")) % 3 == 0


def expected(workflow_id: str) -> int:
    """The result of the run of `workflow_id`, as a run without crashes gives it."""
    n = int(workflow_id.removeprefix("s"))
    extra = signal_value(workflow_id) if is_waiter(workflow_id) else 0
    return n + (n + 1) + extra


def _ledger(name: str) -> str:
    if LEDGER is None:
        raise RuntimeError("storage_child.LEDGER is not set")
    ctx = current_ctx()
    nonce = os.urandom(8).hex()
    line = {"run": ctx.run_id, "name": name, "key": ctx.key(), "nonce": nonce, "pid": os.getpid()}
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # One O_APPEND write, not synced: the page cache keeps it through a SIGKILL.
        os.write(fd, orjson.dumps(line) + b"\n")
    finally:
        os.close(fd)
    return nonce


async def work(name: str, value: int) -> dict[str, Any]:
    return {"v": value, "nonce": _ledger(name)}


def work_in_thread(name: str, value: int) -> dict[str, Any]:
    return {"v": value, "nonce": _ledger(name)}


@workflow(name="sc_run")
async def sc_run(ctx: Ctx, n: int) -> int:
    """Two steps; a waiter takes a "go" signal between them."""
    total = (await ctx.step("a", work, "a", n))["v"]
    if is_waiter(ctx.workflow_id):
        total += await ctx.wait_for("go")
    fn = work_in_thread if n % 2 else work
    return total + (await ctx.step("b", fn, "b", n + 1))["v"]


def reached(point: str, chosen: str | None, nth: int) -> bool:
    """Counts one arrival at `point`; whether it is the `nth` at the `chosen` one."""
    REACHED[point] += 1
    return point == chosen and REACHED[point] == nth


def die(point: str, what: Any) -> None:
    emit("KILL", point, orjson.dumps(what).decode())
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStorage(Storage):
    """The journal's storage, killing the process at the `nth` checkpoint write,
    rename or compaction (whichever `point` names)."""

    def __init__(self, point: str, nth: int) -> None:
        self.point, self.nth = point, nth
        self.compacting = False

    def _reached(self, point: str) -> bool:
        return reached(point, self.point, self.nth)

    def write_file(self, path: Path, data: bytes) -> None:
        if path.name.endswith(".ckpt.tmp") and self._reached("ckpt-tmp-mid"):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.pwrite(fd, data[: len(data) // 2], 0)
            die("ckpt-tmp-mid", {"path": path.name, "bytes": len(data)})
        super().write_file(path, data)

    def rename(self, src: Path, dst: Path) -> None:
        if dst.suffix == ".ckpt":
            if self._reached("ckpt-before-rename"):
                die("ckpt-before-rename", {"path": dst.name})
            super().rename(src, dst)
            self.compacting = True  # the removes that follow are this checkpoint's compaction
            if self._reached("ckpt-after-rename"):
                die("ckpt-after-rename", {"path": dst.name})
            return
        super().rename(src, dst)

    def remove(self, path: Path) -> None:
        first = path.suffix == ".seg" and self.compacting
        if first:
            self.compacting = False
            if self._reached("compact-before-remove"):
                die("compact-before-remove", {"path": path.name})
        super().remove(path)
        if first and self._reached("compact-after-remove"):
            die("compact-after-remove", {"path": path.name})


class _KillingConnection:
    """The history thread's connection, killing the process at COMMIT (before it,
    or after it and before `on_stored`)."""

    def __init__(self, db: Any, point: str, run_ids: list[str]) -> None:
        self.db, self.point, self.run_ids = db, point, run_ids

    def executemany(self, sql: str, rows: Any) -> Any:
        return self.db.executemany(sql, rows)

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self.point == "history-before-commit":
            die(self.point, self.run_ids)
        got = self.db.execute(sql, *args)
        if sql == "COMMIT" and self.point == "history-after-commit":
            die(self.point, self.run_ids)
        return got


def kill_in_history_batch(point: str, nth: int) -> None:
    """Wraps `SqliteHistory._write` so that its `nth` batch dies at `point` (if `point`
    is a history point)."""
    write = SqliteHistory._write
    chosen = "history-batch" if point.startswith("history-") else None

    def _write(self: SqliteHistory, db: Any, closed: list[Any]) -> None:
        if reached("history-batch", chosen, nth):
            db = _KillingConnection(db, point, [c.row.run_id for c in closed])
        write(self, db, closed)

    SqliteHistory._write = _write  # type: ignore[method-assign]


async def main(home: str, point: str, nth: int, first_run: int) -> None:
    storage = KillingStorage(point, nth)
    kill_in_history_batch(point, nth)
    config = dataclasses.replace(CONFIG, storage=storage)
    engine = Engine(home, app=None, config=config)
    await engine.open()
    waiters: collections.deque[str] = collections.deque()
    pending: set[asyncio.Task[None]] = set()

    async def result(workflow_id: str) -> None:
        value = await engine.handle(workflow_id).result()
        emit("RESULT", workflow_id, orjson.dumps(value).decode())

    async def settled(workflow_id: str) -> None:
        """Returns once the run waits for its signal with all it recorded durable (so
        its step a's result is durable)."""
        run = engine.runs.latest(workflow_id)

        def waiting() -> bool:
            live_wait = bool(run.pending) and len(run.live.waiters) == len(run.pending)
            return run.live.parked or live_wait

        await engine.wait_until(lambda: waiting() and engine.durability.durable_lsn >= run.last_lsn)

    async def chain(first: int) -> None:
        for n in range(first, first_run + RUNS, CHAINS):
            workflow_id = f"s{n}"
            await engine.start("sc_run", n, id=workflow_id)
            emit("STARTED", workflow_id)
            if not is_waiter(workflow_id):
                await result(workflow_id)
                continue
            task = asyncio.ensure_future(result(workflow_id))
            pending.add(task)
            waiters.append(workflow_id)
            while len(waiters) > OPEN_WAITERS:
                oldest = waiters.popleft()
                await settled(oldest)
                emit("PARKED", oldest)
                await engine.signal(oldest, "go", signal_value(oldest))
                emit("SIGNALED", oldest, signal_value(oldest))

    await asyncio.gather(*(chain(first_run + i) for i in range(CHAINS)))
    emit("DONE", orjson.dumps(dict(REACHED)).decode())
    os._exit(0)  # not closed: a close writes a checkpoint the parent did not ask for


if __name__ == "__main__":
    LEDGER = os.environ["LEDGER"]
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
