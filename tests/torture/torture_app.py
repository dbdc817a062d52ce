"""The torture workload: workflows whose steps write every execution to a side ledger.

Each step function appends one line per execution (its run's id, its name,
`ctx.key()`, the attempt's outcome and a fresh nonce) to the ledger, opened
with O_APPEND and fsynced before the function returns, and returns the
nonce with its value. The journal's recorded nonce then names the execution
whose result became durable: no execution of that step may come after it.
Results depend only on the plan and the signals, never on crashes.

A box run (`BOX`, `boxes`) takes a plain and an async update handler, parks on a
signal, and returns the ids of the updates it applied, in order; its async
handler runs a step that writes its ledger line like the others (with the
update's id). The child sends its updates, some before and some after it closes
and opens its engine again within its life, and the parent sends the rest.

A limited step (`limit=LIMIT`) also writes an `enter` line as its function
begins and a `leave` line just before it returns (`_edge`), both inside the
permit its attempt holds: so, in one process life, the steps between their two
lines are never more than the permits held at once, which may never exceed
the limit's size.

A queued run (`inp["queue_key"]`: a quarter of the runs that take no update, as
an update is refused while a run waits in its queue) is started in queue `QUEUE`,
under one of `QUEUE_KEYS` keys, which the child sizes to one run at a time per key
before it starts any run. Its first step writes a `begin` line, then it naps
(parked, holding its place) and does what its plan says, and its last step writes
an `end` line (`queued_edge`): so two runs of a key the queue let in at once would
show in the ledger as one beginning while the other is inside.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import (
    Config,
    Ctx,
    Engine,
    EngineClosed,
    Rejected,
    RetryPolicy,
    current_ctx,
    handler,
    object,
    step,
    workflow,
)
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.storage import Storage
from fusee_runtime.store import sqlite_history as history
from fusee_runtime.store.shards import beside

LEDGER: str | None = None
"""The ledger's path, set by whoever runs the workload (the child, then the parent)."""

CONFIG = Config(segment_bytes=32 << 10, payload_bytes_max=8 << 10, checkpoint_bytes=32 << 10)
"""Small segments, so that a trial's journal (about 330 KB) rotates about ten
times, batches span segments, faults land during rotations and compaction has
whole segments to delete; and small checkpoints. One is due once the journal
has grown by `checkpoint_bytes` or by the last checkpoint's own size, if larger:
70 to 180 KB here, as every run is open at once. So a life that runs to its end
writes 3 checkpoints and compaction deletes 2 segments. No payload of the
workload comes near 8 KiB; a segment must hold the largest record. Both lives
use this."""

FAULTS = ("kill", "torn", "enospc", "eio", "short", "ckpt-kill", "ckpt-fail", "history-kill")
"""What ends a trial's first life: the parent's SIGKILL at a random instant; the
child's own SIGKILL halfway through writing a batch (a torn write); a full
disk halfway through a batch; a failed `fdatasync`; the parent's SIGKILL
while every `pwrite` writes only a few bytes at a time (short writes); the
child's own SIGKILL in the middle of writing a checkpoint or of compacting; a
checkpoint or compaction whose I/O fails (which changes nothing), then the
parent's SIGKILL; or the child's own SIGKILL as the history store commits."""

PG_FAULTS = ("kill", "drop", "history-kill")
"""What ends a first life with the journal in PostgreSQL: the parent's SIGKILL at a
random instant; the server dropping the child's sessions at a random instant (as for
a lost network), after which the child must acknowledge nothing more; or the child's
own SIGKILL as the history store commits. (The storage faults are the local
journal's files'.)"""

CHECKPOINT_FAULTS = ("ckpt-kill", "ckpt-fail")


class FaultStorage(Storage):
    """The storage in the child, with one fault injected at the `at`-th operation
    of its kind.

    Journal appends (a segment's creation and checkpoint files are not counted):

    - torn: the `at`-th append write writes about half its batch, cut inside a
      frame, then the process SIGKILLs itself;
    - enospc: the same half, then the write fails with ENOSPC;
    - eio: the `at`-th data sync fails with EIO (its batch: what was written since the
      last sync that succeeded; none when that sync is a close's, with nothing new);
    - short: every `pwrite` (checkpoint files' too) writes 1 to 7 bytes.

    Before a torn write kills the process, and before a failed write or sync
    raises, it prints `FAULT <records>`: the records of the batch being
    written, none of which may be acknowledged.

    Checkpoint and compaction I/O, counted together: a checkpoint's
    `write_file` (its `.ckpt.tmp`), the `rename` into place, and each `remove`
    of a compacted segment or checkpoint. At the `at`-th of them:

    - ckpt-kill: the process SIGKILLs itself halfway through writing the
      checkpoint file, just after the rename (compaction not begun), or just
      after a remove (compaction half done, its directory not synced);
    - ckpt-fail: the same operation fails instead (ENOSPC halfway through the
      file, EIO before the rename or the remove). The engine logs it and goes
      on; the parent kills the child later, as in `kill`.

    It prints `INJECTED <operation> <file>` before either, and, to count what
    a life did, `CHECKPOINT <file>` after each rename and `REMOVED <file>`
    after each remove. `sync_dir` is no target: after a SIGKILL, whether a
    directory was synced makes no difference the next process can see.
    """

    def __init__(self, fault: str, at: int, seed: int) -> None:
        self.fault, self.at = fault, at
        self.rng = random.Random(seed)
        self.writes = self.syncs = self.checkpoint_ops = 0
        self.batch: list[bytes] = []
        self.unsynced = False
        """Whether a write of `batch` came after the last data sync that succeeded: a
        sync with nothing new to sync (an engine's close) fails with nothing in it."""
        self.faulted = False
        """Whether the fault was injected (a life that meets it may fail to go on)."""
        # Per thread: a checkpoint is written on its own thread while the journal
        # appends on another (or on the loop), and its writes are not appends.
        self.doing = threading.local()

    def create(self, path: Any, size_bytes: int, header: bytes) -> int:
        self.doing.create = True
        try:
            return super().create(path, size_bytes, header)
        finally:
            self.doing.create = False

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.fault == "short" and not getattr(self.doing, "create", False):
            data = data[: self.rng.randint(1, 7)]
        return super().pwrite(fd, data, offset)

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        if getattr(self.doing, "create", False) or getattr(self.doing, "file", False):
            return super().write(fd, offset, data)
        self.writes += 1
        # The batch being written, across a segment rotation: none of it is
        # acknowledged until all of it is synced.
        if fmt.starts_batch(data):
            self.batch = []
        self.batch.append(bytes(data))
        self.unsynced = True
        if self.writes == self.at and self.fault in ("torn", "enospc"):
            super().write(fd, offset, data[: self._inside_a_frame(data)])
            self._report(self.batch)
            if self.fault == "torn":
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "appending (injected)")
        super().write(fd, offset, data)

    @staticmethod
    def _inside_a_frame(data: bytes | memoryview) -> int:
        """About half of `data`, never on a frame's boundary: the tear cuts a frame."""
        half = len(data) // 2
        pos = max((end for _, _, end in fmt.frames(data) if end <= half), default=0)
        return pos + 1 if half == pos else half

    def sync(self, fd: int) -> None:
        if getattr(self.doing, "create", False):
            return super().sync(fd)
        self.syncs += 1
        if self.syncs == self.at and self.fault == "eio":
            self._report(self.batch if self.unsynced else [])
            raise OSError(errno.EIO, os.strerror(errno.EIO), "fdatasync (injected)")
        super().sync(fd)
        self.unsynced = False

    def _report(self, batch: list[bytes]) -> None:
        self.faulted = True
        records = [orjson.loads(p) for data in batch for _, p, _ in fmt.frames(data)]
        os.write(1, b"FAULT " + orjson.dumps(records) + b"\n")

    def write_file(self, path: Path, data: bytes) -> None:
        self.doing.file = True
        try:
            if self._checkpoint_fault("write_file", path):
                super().write_file(path, data[: len(data) // 2])
                if self.fault == "ckpt-kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "checkpoint (injected)")
            super().write_file(path, data)
        finally:
            self.doing.file = False

    def rename(self, src: Path, dst: Path) -> None:
        if self._checkpoint_fault("rename", dst) and self.fault == "ckpt-fail":
            raise OSError(errno.EIO, os.strerror(errno.EIO), "rename (injected)")
        super().rename(src, dst)
        _say("CHECKPOINT", dst.name)
        if self.checkpoint_ops == self.at and self.fault == "ckpt-kill":
            os.kill(os.getpid(), signal.SIGKILL)

    def remove(self, path: Path) -> None:
        if self._checkpoint_fault("remove", path) and self.fault == "ckpt-fail":
            raise OSError(errno.EIO, os.strerror(errno.EIO), "remove (injected)")
        super().remove(path)
        _say("REMOVED", path.name)
        if self.checkpoint_ops == self.at and self.fault == "ckpt-kill":
            os.kill(os.getpid(), signal.SIGKILL)

    def _checkpoint_fault(self, operation: str, path: Path) -> bool:
        """Counts one checkpoint or compaction operation; whether the fault is due at it
        (and if so says where)."""
        self.checkpoint_ops += 1
        due = self.checkpoint_ops == self.at and self.fault in CHECKPOINT_FAULTS
        if due:
            self.faulted = True
            _say("INJECTED", operation, path.name)
        return due


def watch_history(kill_at: int) -> None:
    """Makes the history store's connections print `HISTORY` as each `COMMIT` of
    closed runs begins, and SIGKILL the process as the `kill_at`-th begins (0:
    never): a crash in the middle of moving closed runs to `history.db`.

    The history store writes through SQLite, not `Storage`, so this wraps
    `history.connect` (the store's writer thread and the loop's reads each call
    it once) with a trace callback, which SQLite calls as each statement starts
    to run; only the writer commits.
    """
    real = history.connect
    commits = 0

    def trace(sql: str) -> None:
        nonlocal commits
        if sql != "COMMIT":
            return
        commits += 1
        _say("HISTORY", commits)
        if commits == kill_at:
            _say("INJECTED", "commit", history.NAME)
            os.kill(os.getpid(), signal.SIGKILL)

    def connect(path: Path) -> sqlite3.Connection:
        conn = real(path)
        conn.set_trace_callback(trace)
        return conn

    history.connect = connect

    # With a PostgreSQL store, closed runs go to fusee_runs: each batch is one
    # transaction, killed here before it commits.
    from fusee_runtime.store import pg_history

    write = pg_history.PgHistory._write

    def pg_write(self: Any, conn: Any, closed: Any) -> None:
        trace("COMMIT")
        write(self, conn, closed)

    pg_history.PgHistory._write = pg_write  # type: ignore[method-assign]


def _say(*words: object) -> None:
    """One line to the parent, in one write(2) (any thread may say it)."""
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


FAST_RETRY = RetryPolicy(attempts=6, initial=0.005, factor=1.0, jitter=False)
BEAT_ROWS = 20
"""Rows a heartbeating step reports, one heartbeat each."""
BEAT_ROW_S = 0.005
"""How long a row takes: the step spans a few flushes of heartbeats (`beats.FLUSH_S`)."""
LIMIT = "tort.limited"
"""The limit of the limited steps: the child sets it (`engine.limit`) as its first
life begins, before it starts any run; later lives only find it."""
LIMIT_PERMITS = 2
"""Its size: at most this many limited steps inside at once in a process."""
LIMITED_HOLD_S = 0.01
"""How long a limited step stays inside: with a fifth of 200 runs calling one at
once, most wait for a permit."""
UPDATE = "bump"
"""The update a quarter of the runs take (`update_id` makes its id), once, at a
random instant after their start; its handler runs a step. `CLOSE` is the signal
sent once it answered: the run waits for it at its end, so the update is applied
whatever the run was doing when it came."""
CLOSE = "close"
UPDATE_AGAIN = ("has no update handler", "send the update again")
"""What a refusal says when the update is to be sent again."""
UPDATE_TRIES = 5000
_failures: dict[str, int] = {}


SHARD_ENV = "TORTURE_SHARD"
"""Tells the child the journal a trial drives, `k n` (journal k of a database laid out
as n journals). Unset: one of one."""


def shard() -> tuple[int, int]:
    """The journal this trial drives, as `SHARD_ENV` says."""
    k, n = os.environ.get(SHARD_ENV, "0 1").split()
    return int(k), int(n)


def plan(seed: int, runs: int, where: tuple[int, int] = (0, 1)) -> list[tuple[str, dict[str, Any]]]:
    """The runs a trial starts: their ids and inputs, from the seed alone; the ids made
    to belong to journal `where` (k of n: children are named after their parent and
    `#`, so theirs belong with it)."""
    rng = random.Random(seed)
    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(runs):
        out.append(
            (
                beside(f"r{i}", where),
                {
                    "steps": rng.randint(1, 6),
                    "threaded": rng.random() < 0.3,
                    "flaky": rng.random() < 0.3,
                    "sleep": rng.choice([0, 0, 0.01, 0.05]),
                    "fan": rng.choice([0, 0, 3, 10]),
                    "signal": rng.random() < 0.4,
                    "base": rng.randint(0, 1000),
                    "kids": rng.choice([0, 0, 0, 2, 3]),
                    "orphan": rng.random() < 0.15,
                    "beats": rng.choice([0, 0, 0, BEAT_ROWS]),
                    "limited": rng.random() < 0.2,
                    "update": rng.random() < 0.25,
                    # (not drawn: the rest of a seed's plan stays as it was) A third
                    # of the runs of a home of one journal call the counter object.
                    "count": COUNTING and where == (0, 1) and i % 3 == 0,
                },
            )
        )
        # (not drawn either) A quarter of the runs that take no update are queued, the
        # keys in turn.
        queued = QUEUEING and i % QUEUE_SHARE == 1 and not out[-1][1]["update"]
        out[-1][1]["queue_key"] = f"k{i // QUEUE_SHARE % QUEUE_KEYS}" if queued else None
    return out


def signal_value(workflow_id: str) -> int:
    return sum(map(ord, workflow_id)) % 97


def expected(workflow_id: str, inp: dict[str, Any]) -> int:
    """The result of a run of `inp`, as a run without crashes gives it."""
    base = inp["base"]
    total = sum(base + i for i in range(inp["steps"]))
    if inp["flaky"]:
        total += base * 2
    total += sum(base + 100 + j for j in range(inp["fan"]))
    total += sum(base + 200 + j for j in range(inp["kids"]))
    if inp["signal"]:
        total += signal_value(workflow_id)
    if inp["limited"]:
        total += base + 300
    if inp["update"]:
        total += base + 400
    return total + inp["beats"] + base + 999


def _ledger(name: str, ok: bool, **more: Any) -> str:
    assert LEDGER is not None, "torture_app.LEDGER is not set"
    ctx = current_ctx()
    nonce = os.urandom(8).hex()
    line = {
        "run": ctx.run_id,
        "name": name,
        "key": ctx.key(),
        "ok": ok,
        "nonce": nonce,
        "pid": os.getpid(),  # which life ran it
        **more,
    }
    _append(LEDGER, line)
    return nonce


def _edge(name: str, edge: str) -> None:
    """A limited step's `enter` or `leave` line, with the life's pid."""
    assert LEDGER is not None, "torture_app.LEDGER is not set"
    ctx = current_ctx()
    line = {"run": ctx.run_id, "name": name, "key": ctx.key(), "edge": edge, "pid": os.getpid()}
    _append(LEDGER, line)


def _append(path: str, line: dict[str, Any]) -> None:
    """One line at the end of the ledger, fsynced before it returns."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # The newline first: a SIGKILL can cut a write(2) short, and the next line
        # (the next life's) then still starts on a line of its own.
        os.write(fd, b"\n" + orjson.dumps(line))
        os.fsync(fd)
    finally:
        os.close(fd)


def _limited_attempt(name: str, value: int, flaky: bool) -> dict[str, Any]:
    """The middle of a limited step's attempt: fails the first in each process if
    `flaky` (the retry takes a permit again), else writes its execution line."""
    key = current_ctx().key()
    if flaky and not _failures.get(key):
        _failures[key] = 1
        _ledger(name, ok=False)
        raise RuntimeError("limited failure")
    return {"v": value, "nonce": _ledger(name, ok=True)}


def limited_in_thread(name: str, value: int, flaky: bool) -> dict[str, Any]:
    """A limited step on a thread: the permit is held until the thread returns."""
    _edge(name, "enter")
    try:
        time.sleep(LIMITED_HOLD_S)
        return _limited_attempt(name, value, flaky)
    finally:
        _edge(name, "leave")


@step(name="tort.limited", limit=LIMIT, retry=FAST_RETRY)
async def limited(name: str, value: int, flaky: bool) -> dict[str, Any]:
    """A limited step on the loop, declared with its limit."""
    _edge(name, "enter")
    try:
        await asyncio.sleep(LIMITED_HOLD_S)
        return _limited_attempt(name, value, flaky)
    finally:
        _edge(name, "leave")


def work_in_thread(name: str, value: int) -> dict[str, Any]:
    return {"v": value, "nonce": _ledger(name, ok=True)}


async def work(name: str, value: int) -> dict[str, Any]:
    return work_in_thread(name, value)


async def flaky(name: str, value: int) -> dict[str, Any]:
    """Fails its first two executions in each process, then succeeds."""
    key = current_ctx().key()
    failed = _failures.get(key, 0)
    if failed < 2:
        _failures[key] = failed + 1
        _ledger(name, ok=False)
        raise RuntimeError(f"flaky failure {failed + 1}")
    return {"v": value, "nonce": _ledger(name, ok=True)}


async def beat(name: str, rows: int) -> dict[str, Any]:
    """Reports each row with a heartbeat; an attempt (after a crash) goes on after the
    last row the journal holds, so the rows of a step's heartbeats only go up."""
    done = current_ctx().progress()
    for row in range(done["row"] + 1 if done else 0, rows):
        await asyncio.sleep(BEAT_ROW_S)
        current_ctx().heartbeat({"row": row})
    return {"v": rows, "nonce": _ledger(name, ok=True)}


COUNTER = "tt.counter"
"""The virtual object the mixed runs call (`inp["count"]`), each once."""
COUNTING = os.environ.get("FUSEE_TORTURE_COUNTER", "1") == "1"
"""Whether runs call the counter (`FUSEE_TORTURE_COUNTER=0` leaves it out: a trial's
plan then is what it was before the counter)."""


@object(name=COUNTER)
class Counter:
    """Who called it, in the order the calls were applied (the harness reads it back)."""

    def __init__(self) -> None:
        self.callers: list[str] = []

    @handler
    async def incr(self, ctx: Ctx, caller: str) -> int:
        self.callers.append(caller)
        return len(self.callers)


QUEUE = "tt.q"
"""The queue of the queued runs (`inp["queue_key"]`): the child sets its sizes, no
limit on the whole and `QUEUE_PER_KEY` per key, before it starts any run; later
lives only find them."""
QUEUE_PER_KEY = 1
QUEUE_KEYS = 8
"""Its keys: four or five runs each in a trial of 200, all started at once (so a run
waits for those before it; more a key, and the trial's tail, where each key's runs
go in one by one, grows longer)."""
QUEUE_SHARE = 4
"""One run in this many of the plan (of those that take no update) is queued."""
QUEUE_NAP_S = 0.01
"""How long a queued run parks after its `begin`, holding its place."""
QUEUEING = os.environ.get("FUSEE_TORTURE_QUEUES", "1") == "1"
"""Whether some runs are queued (`FUSEE_TORTURE_QUEUES=0` leaves them out: a trial's
plan then is what it was before the queue)."""


async def queued_edge(name: str, queue_key: str) -> dict[str, Any]:
    """A queued run's first or last step (`qbegin`, `qend`): its ledger line says which
    (`queued`: `begin` or `end`) and the run's queue key; checked as every step's is."""
    edge = name.removeprefix("q")
    return {"v": 0, "nonce": _ledger(name, ok=True, queued=edge, queue_key=queue_key)}


@workflow(name="tt_mixed")
async def mixed(ctx: Ctx, inp: dict[str, Any]) -> int:
    base = inp["base"]
    queue_key = inp.get("queue_key")
    if queue_key:  # inside from here to `qend`: no other run of its key may be
        await ctx.step("qbegin", queued_edge, "qbegin", queue_key)
        await ctx.sleep("qnap", QUEUE_NAP_S)
    bumped: list[int] = []
    if inp["update"]:  # applied wherever the run is when it comes; then "close" comes

        async def bump(value: int) -> int:
            return await _bump(ctx, value, bumped)

        ctx.on_update(UPDATE, bump)
    fn = work_in_thread if inp["threaded"] else work
    total = 0
    for i in range(inp["steps"]):
        total += (await ctx.step(f"s{i}", fn, f"s{i}", base + i))["v"]
    if inp["flaky"]:
        total += (await ctx.step("flaky", flaky, "flaky", base * 2, retry=FAST_RETRY))["v"]
    if inp["beats"]:
        total += (await ctx.step("beat", beat, "beat", inp["beats"]))["v"]
    if inp["limited"]:
        args = ("limited", base + 300, inp["flaky"])
        if inp["threaded"]:  # the limit given to ctx.step
            call = ctx.step("limited", limited_in_thread, *args, limit=LIMIT, retry=FAST_RETRY)
        else:  # the limit the @step declares
            call = limited(*args)
        total += (await call)["v"]
    if inp["sleep"]:
        await ctx.sleep("nap", inp["sleep"])
    if inp["fan"]:
        legs = [ctx.step(f"f{j}", work, f"f{j}", base + 100 + j) for j in range(inp["fan"])]
        total += sum(r["v"] for r in await ctx.all(legs))
    if inp["kids"]:
        ids = [f"{ctx.workflow_id}#kid{j}" for j in range(inp["kids"])]
        kids = await ctx.all([ctx.start_child(kid, k, base + 200 + j) for j, k in enumerate(ids)])
        total += sum(await ctx.all([k.result() for k in kids]))
    if inp["orphan"]:
        # Waits for a signal nobody sends: terminated when this run closes.
        await ctx.start_child(orphan, f"{ctx.workflow_id}#orphan")
    if inp["signal"]:
        total += await ctx.wait_for("go")
    if inp["update"]:
        await ctx.wait_for(CLOSE)
        total += sum(bumped)
    if inp.get("count"):  # once per run, whatever crashes: the harness checks it
        await ctx.object(COUNTER, "c").call("incr", ctx.workflow_id)
    total += (await ctx.step("last", work, "last", base + 999))["v"]
    if queue_key:
        await ctx.step("qend", queued_edge, "qend", queue_key)
    return total


async def _bump(ctx: Ctx, value: int, bumped: list[int]) -> int:
    """The update's handler: a step (its ledger line checked as every step's is), a nap
    for odd values, then what the run adds to its result."""
    v = int((await ctx.step("u", work, "u", value))["v"])
    if value % 2:
        await ctx.sleep("unap", 0.01)
    bumped.append(v)
    return v


def update_id(workflow_id: str) -> str:
    return f"{workflow_id}-{UPDATE}"


async def send_update(engine: Engine, workflow_id: str, value: int) -> Any:
    """Applies the run's update, as a client does: sent again with the same id while
    the engine says to (the run's code has not registered its handler yet, or is
    replaying). Its result; another refusal is raised."""
    for _ in range(UPDATE_TRIES):
        try:
            return await engine.update(workflow_id, UPDATE, value, update_id(workflow_id))
        except Rejected as e:
            if not any(why in str(e) for why in UPDATE_AGAIN):
                raise
        await asyncio.sleep(0.002)
    raise AssertionError(f"{workflow_id}: update refused {UPDATE_TRIES} times")


@workflow(name="tt_kid")
async def kid(ctx: Ctx, value: int) -> int:
    """A child: one step, whose ledger line is checked as every step's is."""
    return int((await ctx.step("k", work, "k", value))["v"])


@workflow(name="tt_orphan")
async def orphan(ctx: Ctx, _: None) -> None:
    await ctx.wait_for("never")


BOX = "tt_box"
"""The box runs' workflow: `PUT` and `ADD` updates, applied while it waits for
`FINISH`; its result lists their ids in the order it applied them."""
PUT = "put"
"""A box's plain update: appends its id at once; answers where it put it (1, 2, ...)."""
ADD = "add"
"""A box's async update: runs a step (`note`, a ledger line with the update's id),
then appends its id; answers where it put it and the step's execution (its nonce)."""
FINISH = "finish"
BOX_SHARE = 10
"""A trial starts one box run for every this many runs of `plan`."""
BOX_PHASES = (0, 0, 1, 1, 2)
"""When a box's update is sent, drawn from these: 0, by the child before it opens
its engine again; 1, by the child after; 2, by the parent's recovery life."""
BOX_AGAIN = ("send the update again", "again once that one answered", "has no update handler")
"""What a refusal says when a box's update is to be sent again once the run parked."""
BOX_TRIES = 100
REOPEN_GRACE_S = 120.0
"""The grace a child's engine closing mid-life gives the step functions running (it
returns as soon as they did): a thread cut off would run on beside the next engine,
whose permits know nothing of it. Never reached on a machine that is not stuck."""


def boxes(
    seed: int, runs: int, where: tuple[int, int] = (0, 1)
) -> list[tuple[str, dict[str, Any]]]:
    """The box runs a trial starts beside `plan`'s, from the seed alone: their ids, and
    their inputs, which list the updates each is sent, in the order sent: `id`,
    `kind` (`PUT` or `ADD`), `phase` (`BOX_PHASES`), `together` (sent with the one
    before it, without waiting for its answer) and `again` (the parent sends it again
    if the child sent it and got no answer)."""
    rng = random.Random(f"{seed} boxes")
    out = []
    for i in range(max(1, runs // BOX_SHARE)):
        wid = beside(f"b{i}", where)
        phases = sorted(rng.choice(BOX_PHASES) for _ in range(rng.randint(3, 6)))
        sends: list[dict[str, Any]] = []
        for k, phase in enumerate(phases):
            kind = rng.choice((PUT, ADD))
            together = bool(sends) and sends[-1]["phase"] == phase and rng.random() < 0.3
            sends.append(
                {
                    "id": f"{wid}.{k}{kind[0]}",
                    "kind": kind,
                    "phase": phase,
                    "together": together,
                    "again": rng.random() < 0.5,
                }
            )
        out.append((wid, {"sends": sends}))
    return out


def groups(inp: dict[str, Any], phase: int) -> list[list[dict[str, Any]]]:
    """A box's updates of `phase`, in groups sent together, in turn."""
    out: list[list[dict[str, Any]]] = []
    for send in inp["sends"]:
        if send["phase"] != phase:
            continue
        if send["together"] and out:
            out[-1].append(send)
        else:
            out.append([send])
    return out


async def note(update_id: str) -> dict[str, Any]:
    """The step of a box's `ADD` update: its ledger line names the update (its name
    too: each of a run's updates has a step of its own, with a key of its own)."""
    return {"v": update_id, "nonce": _ledger(f"add {update_id}", ok=True, update=update_id)}


@workflow(name=BOX)
async def box(ctx: Ctx, _: Any) -> list[str]:
    """Parks on `FINISH` while its updates come; the ids of those it applied, in order."""
    applied: list[str] = []

    def put(update_id: str) -> int:
        applied.append(update_id)
        return len(applied)

    async def add(update_id: str) -> dict[str, Any]:
        done = await ctx.step("add", note, update_id)
        applied.append(update_id)
        return {"at": len(applied), "nonce": done["nonce"]}

    ctx.on_update(PUT, put)
    ctx.on_update(ADD, add)
    await ctx.wait_for(FINISH)
    return applied


def parked(engine: Engine, workflow_id: str) -> bool:
    """Whether the run waits parked (its code dropped until a signal or an update)."""
    return engine.runs.latest(workflow_id).live.parked


async def send_box_update(
    engine: Engine,
    workflow_id: str,
    send: dict[str, Any],
    settle: Callable[[], Awaitable[None]],
) -> Any:
    """Applies one of a box's updates, as a client does: with its id, sent again while
    the engine says to (the run applies an earlier update, or its code does not run
    yet), once `settle()` returned (the run parked again). Its answer; another
    refusal is raised, `EngineClosed` too."""
    refused = ""
    for _ in range(BOX_TRIES):
        try:
            return await engine.update(workflow_id, send["kind"], send["id"], send["id"])
        except EngineClosed:
            raise
        except Rejected as e:
            if not any(why in str(e) for why in BOX_AGAIN):
                raise
            refused = str(e)
        await settle()
        await asyncio.sleep(0)  # (a turn of the loop: a refusal may come of a state just left)
    raise AssertionError(
        f"{workflow_id}: update {send['id']} refused {BOX_TRIES} times, the last: {refused}"
    )


def closed_under(e: BaseException) -> bool:
    """Whether a call failed as the engine closed, so that it may be made again on the
    engine opened next: `EngineClosed` (it did nothing), or a wait the close cut off
    (the call may have taken effect: only calls that can be made twice are made again)."""
    said = str(e)
    return isinstance(e, EngineClosed) or (
        isinstance(e, Rejected)
        and ("the engine closed" in said or "the engine stopped before" in said)
    )
