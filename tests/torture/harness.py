"""One torture trial: run the workload in a child, end it mid-work (a SIGKILL at a
random instant, or a fault its storage injects: a torn write, a full disk, a failed
`fdatasync`, short writes, a crash or failure while a checkpoint is written or
segments compacted, a crash as the history store commits), recover the home in
this process, run everything to completion, and check the invariants. Early in
its life the child closes its engine and opens another on the home (`child.Lives`),
under the work in flight, unless the fault came first.

What the crash left is read before recovery from the three places that hold
records since compaction (`read_home`): the newest whole checkpoint, the history
store and the segments after the checkpoint.

The invariants (each violation is reported in words, with the run it concerns):

- every run whose start the child saw acknowledged exists, once;
- every signal whose delivery was acknowledged was delivered exactly once (a
  signal sent but not acknowledged before the kill is sent again only if the
  journal does not hold it);
- every result the child read before the kill is the final result;
- every run's final result is what a run without crashes gives (`expected`);
- no step ran again after the execution whose result became durable (the
  journal's recorded nonce is the last execution in the ledger for its key);
- every execution of a step used the same `ctx.key()`;
- nothing in a batch whose write or sync failed was acknowledged;
- at the end, each run is in the history store once;
- within one process life, never more limited steps inside at once (between
  their `enter` and `leave` ledger lines) than the limit's size (the child's
  engine closes for its reopen once its step functions returned);
- no permit leaked: once every run closed (at the end, and in the first life
  if it got there), no limit has a permit in use or a step waiting, none ever
  had more in use than its size, and the limit the first life set (durably,
  before it started any run) has the size it set;
- where two places hold the same lsn (the checkpoint, the history store, a
  segment compaction has not deleted yet) they hold the same record, and every
  record of a segment is in the checkpoint or history store if it is not after
  the checkpoint. A `LimitSet` belongs to no run: the checkpoint holds it as
  its limit's size and the lsn that set it (its "limits"), which must agree
  with a segment that still holds it;
- each planned update of a run of the plan is accepted once and applied once,
  its step completed once, and the result its caller read before the crash is
  the one recorded and the one the same update id answers after it
  (`_check_updates`);
- every acknowledged update is applied exactly once, in the final result, in the
  order acknowledged (`_check_boxes`): the box runs take plain and async updates
  with ids, from the child before and after its reopen and from the last life,
  and return the ids they applied, in order. Each update answered is in its
  run's result once, after every update answered before it was sent, where its
  answer says; one never answered is there at most once; the result lists what
  the journal applied, in its order; an async update's step completed once, and
  no execution of it came after the one recorded (the ledger);
- the queued runs (`torture_app.QUEUE`, one run at a time per key) are never two of
  a key inside at once, as the ledger's `begin` and `end` lines show across both
  lives (a run is inside from its first begin to its last end: either may run again
  after a crash), first begin in the order they started, are each let in once
  (`RunAdmitted`, in the journal the crash left for every run that began in the
  first life), run no code before, and complete; no place is left held
  (`_check_queues`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import os
import queue
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import Engine
from fusee_runtime.codecs import from_environment
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal.reader import first_lsns, recover
from fusee_runtime.journal.records import CLOSES, R, decode
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.sealing import is_envelope, of_environment
from fusee_runtime.objects import OBJECT_PREFIX
from fusee_runtime.store import history_db as history

from . import torture_app

HERE = Path(__file__).parent

KILL_DELAY_S = 0.02
"""The parent's SIGKILL comes after a random number of results (so mid-work on a
machine of any speed), and then up to this much later."""

FAULT_WITHIN = {"ckpt-kill": 8, "ckpt-fail": 8, "history-kill": 8}
"""An injected fault comes at a uniformly random operation of its kind up to this
one: a journal append write or sync up to the 40th (a life makes 40 to 150 of
each), a checkpoint or compaction operation up to the 8th (a life that runs to
its end writes 3 checkpoints, a write and a rename each, and its compactions
remove about 3 files), a history store commit up to the 8th (such a life makes
12 to 30)."""

SELF_KILLS = ("torn", "ckpt-kill", "history-kill")
"""The faults that end the first life by the child's own SIGKILL."""

BoxEvent = tuple[str, str, str, Any]
"""A box update sent or answered: `("sent", id, update id, None)` as it is first sent,
`("answered", id, update id, answer)` once its answer came."""

SILENCE_S = 120.0
"""A child that prints nothing for this long has hung: a violation, not a wait."""

FINISH_S = 300.0
"""A last life whose runs have not all closed after this long has hung (a run left
waiting in its queue, say): the trial fails, naming the runs still open."""


@dataclass
class Report:
    seed: int
    fault: str = "kill"
    cut: bool = False
    """Whether recovery found a torn tail to cut (a batch the crash left half-written)."""
    killed: bool = False
    """Whether the first life ended mid-work (by the fault or the parent's SIGKILL),
    rather than after every run had finished or could do nothing more."""
    injected: str = ""
    """Where a checkpoint, compaction or history store fault was injected
    (`<operation> <file>`), if it was."""
    checkpoints: int = 0
    """Checkpoints the first life wrote."""
    compacted: int = 0
    """Segments the first life's compactions deleted."""
    history_commits: int = 0
    """History store commits the first life began."""
    compacted_records: int = 0
    """Records of the journal the crash left that only the checkpoint or the
    history store still held (compaction had deleted their segments)."""
    runs: int = 0
    steps: int = 0
    signals: int = 0
    children: int = 0
    heartbeats: int = 0
    """`StepHeartbeat` records the recovered journal holds."""
    limited: int = 0
    """Limited steps the recovered journal holds completed."""
    updates: int = 0
    """Runs that took an update (each checked applied once)."""
    counted: int = 0
    """Runs that called the counter object (each checked to reach it once)."""
    queued: int = 0
    """Queued runs checked (`torture_app.QUEUE`): let in once, alone in their key, in
    the order they started."""
    waited: int = 0
    """Of those, the runs started while another run of their key was inside (which
    had to wait for their turn)."""
    boxes: int = 0
    """Box runs checked (`torture_app.boxes`)."""
    box_updates: int = 0
    """Their updates acknowledged (answered), each checked in its run's result."""
    box_unanswered: int = 0
    """Their updates sent and never answered (each checked applied at most once)."""
    reopened: bool = False
    """Whether the child closed and opened its engine again mid-life."""
    after_reopen: int = 0
    """Box updates the child's engine answered after that reopen."""
    entered: int = 0
    """Attempts of limited steps the ledger shows entering, in both lives."""
    crowded: int = 0
    """Lives in which the ledger shows as many limited steps inside at once as the
    limit's size (fewer, and the limit was never put to the test)."""
    violations: list[str] = field(default_factory=list)


@dataclass
class Seen:
    """What the child acknowledged before it died."""

    started: set[str] = field(default_factory=set)
    signaled: set[str] = field(default_factory=set)
    results: dict[str, Any] = field(default_factory=dict)
    updated: dict[str, Any] = field(default_factory=dict)
    """The result of each run's update the child read (`UPDATED`)."""
    closed: set[str] = field(default_factory=set)
    """The runs whose `CLOSE` signal, sent after the update, was durable."""
    box: list[BoxEvent] = field(default_factory=list)
    """The box runs' updates, in the order the child sent them and read their answers."""
    reopened_at: int | None = None
    """How many of `box` came before the child's engine was open again (`REOPENED`)."""
    done: bool = False
    fault_records: list[list[Any]] | None = None
    """The records not yet durable when the storage injected its fault."""
    pid: int = 0
    """The child's: ledger lines of its life carry it."""
    injected: str = ""
    checkpoints: int = 0
    compacted: int = 0
    history_commits: int = 0
    limit_set: bool = False
    """Whether the child said the limit's size was durable (`LIMIT`)."""
    limits: list[dict[str, Any]] | None = None
    """`engine.limits()` once every run had closed, if the life got there."""
    queue_set: bool = False
    """Whether the child said the queue's sizes were durable (`QUEUE`)."""
    queues: list[dict[str, Any]] | None = None
    """`engine.queues()` once every run had closed, if the life got there."""


@dataclass
class Evidence:
    """Everything a trial's verdict is drawn from."""

    planned: dict[str, dict[str, Any]]
    seen: Seen
    finals: dict[str, Any]
    journal: list[list[Any]]
    ledger: list[dict[str, Any]]
    after_crash: list[list[Any]] = field(default_factory=list)
    """The journal as the crash left it, before recovery went on."""
    disagreements: list[str] = field(default_factory=list)
    """Where the places that hold records disagreed, after the crash or at the end."""
    stored: dict[str, int] = field(default_factory=dict)
    """Rows in the history store at the end, by workflow id."""
    limits: list[dict[str, Any]] = field(default_factory=list)
    """`engine.limits()` at the end of the last life, every run closed."""
    updated: dict[str, Any] = field(default_factory=dict)
    """The result of each run's update in the last life, sent again (the same update
    id) if the run was open, whether or not the first life had applied it."""
    boxes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The box runs planned (`torture_app.boxes`), by id; their results are in `finals`."""
    box_after: list[BoxEvent] = field(default_factory=list)
    """The box updates the last life sent and answered, as `Seen.box` (after it)."""
    queues: list[dict[str, Any]] = field(default_factory=list)
    """`engine.queues()` at the end of the last life, every run closed."""


def trial(
    seed: int,
    workdir: Path,
    runs: int = 200,
    fault: str = "kill",
    between: Callable[[Path, Seen], None] | None = None,
    store: str | None = None,
    shard: tuple[int, int] = (0, 1),
) -> tuple[Report, Evidence]:
    """Runs trial `seed` in `workdir` (its home and ledger stay there), its first
    life ended by `fault` (one of `torture_app.FAULTS`, or with a PostgreSQL `store`,
    which then holds the journal, one of `torture_app.PG_FAULTS`). With `shard` (k, n)
    the `store` is journal k of a database laid out as n, and the runs' ids belong to it.

    `between(workdir, seen)`, if given, runs after the kill and before recovery: the
    harness's own tests damage the home there, to see the check catch it.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    home, ledger = workdir / "home", workdir / "ledger"
    rng = random.Random(seed)
    report = Report(seed, fault)
    planned = dict(torture_app.plan(seed, runs, shard))
    boxes = dict(torture_app.boxes(seed, runs, shard))
    seen = _live(home, ledger, seed, planned, rng, report, store, shard)
    if between is not None:
        between(workdir, seen)
    crashed = read_home(home, store)
    report.cut, report.compacted_records = crashed.cut, crashed.compacted
    torture_app.LEDGER = str(ledger)
    finished = asyncio.run(_finish(home, planned, boxes, seen, crashed.records, store))
    finals, limits, updated, box_after, queues = finished
    final = read_home(home, store)
    evidence = Evidence(
        planned,
        seen,
        finals,
        final.records,
        _ledger(ledger),
        crashed.records,
        [f"after the crash, {d}" for d in crashed.disagreements]
        + [f"at the end, {d}" for d in final.disagreements],
        final.stored,
        limits,
        updated,
        boxes,
        box_after,
        queues,
    )
    check(report, evidence)
    return report, evidence


def _live(
    home: Path,
    ledger: Path,
    seed: int,
    planned: dict[str, dict[str, Any]],
    rng: random.Random,
    report: Report,
    store: str | None = None,
    shard: tuple[int, int] = (0, 1),
) -> Seen:
    runs = len(planned)
    at = rng.randint(1, FAULT_WITHIN.get(report.fault, 40))
    args = [str(seed), str(runs), report.fault, str(at)]
    env = {k: v for k, v in os.environ.items() if k != "FUSEE_STORE"}
    if store is not None:
        env["FUSEE_STORE"] = store
    env[torture_app.SHARD_ENV] = f"{shard[0]} {shard[1]}"
    with open(ledger.with_name("child.err"), "wb") as err:
        child = subprocess.Popen(
            [sys.executable, str(HERE / "child.py"), str(home), str(ledger), *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen = Seen(pid=child.pid)
    kill_at: float | None = None
    parent_kills = ("kill", "short", "ckpt-fail", "drop")
    kill_after = rng.randint(0, runs * 4 // 5) if report.fault in parent_kills else None
    heard = time.monotonic()
    sends: list[tuple[float, str]] = []  # (when, workflow id)
    eof = parent_killed = False
    while not eof:
        now = time.monotonic()
        if kill_at is not None and now >= kill_at and report.fault == "drop" and store:
            # The server drops the child's sessions (as for a lost network): it must
            # stop (fail-stop), acknowledging nothing more; killed once it says DONE.
            _drop_sessions(store, child.pid)
            report.killed = True
            kill_at = kill_after = None
            continue
        if kill_at is not None and now >= kill_at:
            child.send_signal(signal.SIGKILL)
            report.killed = parent_killed = True
            break
        for when, wid in [s for s in sends if s[0] <= now]:
            sends.remove((when, wid))
            with contextlib.suppress(BrokenPipeError):
                child.stdin.write(f"{wid} {torture_app.signal_value(wid)}\n")  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
        wake = min([t for t, _ in sends] + ([kill_at] if kill_at else []), default=now + 0.05)
        try:
            line = lines.get(timeout=max(0.0, wake - now))
        except queue.Empty:
            if now - heard > SILENCE_S:
                report.violations.append(f"the child printed nothing for {SILENCE_S:.0f} s")
                kill_at = now
            continue
        heard = time.monotonic()
        if line is None:
            eof = True
            break
        _take(line, seen)
        if kill_at is None and kill_after is not None and len(seen.results) >= kill_after:
            kill_at = time.monotonic() + rng.uniform(0, KILL_DELAY_S)
        started = line.split()[1] if line.startswith("STARTED ") else None
        if started in planned and planned[started]["signal"]:
            sends.append((time.monotonic() + rng.uniform(0, 0.3), line.split()[1]))
        elif line == "DONE":
            kill_at = time.monotonic()  # killed after it finished: nothing to lose
    child.wait()
    while not eof and (line := lines.get()) is not None:  # what it wrote before it died counts
        _take(line, seen)
    if child.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
    reader.join()
    child.stdout.close()  # type: ignore[union-attr]
    if report.killed and seen.done and report.fault != "drop":
        report.killed = False  # the kill came after the end: not a crash mid-work
    if seen.fault_records is not None and report.fault != "short":
        report.killed = True
    killed_itself = report.fault in SELF_KILLS and bool(seen.fault_records or seen.injected)
    if killed_itself and not seen.done:
        report.killed = True
    report.injected = seen.injected
    report.checkpoints, report.compacted = seen.checkpoints, seen.compacted
    report.history_commits = seen.history_commits
    expected_kill = child.returncode == -signal.SIGKILL and (parent_killed or killed_itself)
    if child.returncode != 0 and not expected_kill:
        tail = ledger.with_name("child.err").read_text(errors="replace").strip().splitlines()
        report.violations.append(
            f"the child died by itself (exit {child.returncode}): {tail[-1] if tail else ''}"
        )
    return seen


def _drop_sessions(store: str, pid: int) -> None:
    """Has the server end every session of process `pid` (fusee names them by pid)."""
    import psycopg

    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"fusee pid {pid} on %",),
        )


def _take(line: str, seen: Seen) -> None:
    word, _, rest = line.partition(" ")
    if word == "STARTED":
        seen.started.add(rest)
    elif word == "SIGNALED":
        seen.signaled.add(rest.split()[0])
    elif word == "RESULT":
        wid, _, value = rest.partition(" ")
        seen.results[wid] = orjson.loads(value)
    elif word == "UPDATED":
        wid, _, value = rest.partition(" ")
        seen.updated[wid] = orjson.loads(value)
    elif word == "CLOSED":
        seen.closed.add(rest)
    elif word == "SENDING":
        wid, uid = rest.split()
        seen.box.append(("sent", wid, uid, None))
    elif word == "ANSWERED":
        wid, uid, value = rest.split(" ", 2)
        seen.box.append(("answered", wid, uid, orjson.loads(value)))
    elif word == "REOPENED":
        seen.reopened_at = len(seen.box)
    elif word == "DONE":
        seen.done = True
    elif word == "FAULT":
        seen.fault_records = orjson.loads(rest)
    elif word == "INJECTED":
        seen.injected = rest
    elif word == "CHECKPOINT":
        seen.checkpoints += 1
    elif word == "REMOVED":
        seen.compacted += rest.endswith(".seg")
    elif word == "HISTORY":
        seen.history_commits += 1
    elif word == "LIMIT":
        seen.limit_set = True
    elif word == "LIMITS":
        seen.limits = orjson.loads(rest)
    elif word == "QUEUE":
        seen.queue_set = True
    elif word == "QUEUES":
        seen.queues = orjson.loads(rest)


async def _finish(
    home: Path,
    planned: dict[str, dict[str, Any]],
    boxes: dict[str, dict[str, Any]],
    seen: Seen,
    journal: list[list[Any]],
    store: str | None = None,
) -> tuple[
    dict[str, Any], list[dict[str, Any]], dict[str, Any], list[BoxEvent], list[dict[str, Any]]
]:
    """Reopens the home, sends the signals its `journal` does not hold and the update
    of each run still open (again, with its id, if the journal holds it: it must not
    be applied twice), and to each box the updates the child did not send, and those
    it sent without an answer that are to be sent `again` (with their ids), each
    once the one before answered, then `FINISH`; runs every run to its end (the
    queued runs' queue as the first life set it: it is not set again). Their
    results, the limits once all closed, the updates' results, what the boxes were
    sent and answered (as `Seen.box`), and the queues once all closed.

    Raises:
        AssertionError: runs still open after `FINISH_S` (it names them).
    """
    wids = _wids(journal)
    received = {(wids[r[1]], r[3]) for r in journal if r[0] == R.SignalReceived}
    closed = {wids[r[1]] for r in journal if r[0] in CLOSES}
    updated: dict[str, Any] = {}
    box_after: list[BoxEvent] = []
    sent = {uid for word, _, uid, _ in seen.box if word == "sent"}
    answered = {uid for word, _, uid, _ in seen.box if word == "answered"}
    # (the keys of now: a test sets FUSEE_KEYS after torture_app made CONFIG)
    config = dataclasses.replace(torture_app.CONFIG, store=store, codec=from_environment())
    async with Engine(home, app=None, config=config) as engine:
        # The planned runs; their children run as part of them.
        listed = {info.id for info in await engine.list()}
        ids = listed & set(planned)
        for wid in sorted(ids):
            if planned[wid]["signal"] and (wid, "go") not in received:
                await engine.signal(wid, "go", torture_app.signal_value(wid))

        async def update(wid: str) -> None:
            value = planned[wid]["base"] + 400
            updated[wid] = await torture_app.send_update(engine, wid, value)
            if (wid, torture_app.CLOSE) not in received:
                await engine.signal(wid, torture_app.CLOSE, 0)

        async def finish_box(wid: str) -> None:
            def settle() -> Awaitable[None]:
                return engine.wait_until(functools.partial(torture_app.parked, engine, wid))

            for send in boxes[wid]["sends"]:
                uid = send["id"]
                if uid in answered or (uid in sent and not send["again"]):
                    continue
                box_after.append(("sent", wid, uid, None))
                answer = await torture_app.send_box_update(engine, wid, send, settle)
                box_after.append(("answered", wid, uid, answer))
            await engine.signal(wid, torture_app.FINISH)

        await asyncio.gather(
            *(update(w) for w in sorted(ids - closed) if planned[w]["update"]),
            *(finish_box(w) for w in sorted(listed & set(boxes))),
        )
        ids |= listed & set(boxes)
        waiting = asyncio.gather(*(engine.handle(w).result() for w in sorted(ids)))
        try:
            results = await asyncio.wait_for(waiting, FINISH_S)
        except TimeoutError:
            still = [f"{i.id} ({i.status})" for i in await engine.list("open") if i.id in ids]
            raise AssertionError(
                f"the last life: {len(still)} runs still open after {FINISH_S:.0f} s: "
                + ", ".join(sorted(still)[:20])
            ) from None
        limits = [dataclasses.asdict(info) for info in engine.limits()]
        queues = [dataclasses.asdict(info) for info in engine.queues()]
    return dict(zip(sorted(ids), results, strict=True)), limits, updated, box_after, queues


def _wids(*journals: list[list[Any]]) -> dict[str, str]:
    """Workflow id by run id, from the RunStarted records."""
    return {r[1]: r[2] for journal in journals for r in journal if r[0] == R.RunStarted}


@dataclass
class Read:
    """A home's records, merged by lsn from every place that holds them."""

    records: list[list[Any]]
    cut: bool
    """Whether recovery will cut a torn tail."""
    disagreements: list[str]
    """Where the places disagree on a record, or none holds one."""
    compacted: int = 0
    """How many of the records no segment holds any more (compaction deleted
    them): the checkpoint or the history store gave them."""
    stored: dict[str, int] = field(default_factory=dict)
    """Rows in the history store, by workflow id."""


def read_home(home: Path, store: str | None = None) -> Read:
    """Every record `home` holds, as the engine will find them on open, in lsn order;
    read without changing anything (the journal is not repaired, `history.db` is
    opened read-only).

    Since compaction, records are in three places: the newest checkpoint that
    reads whole (every record up to its lsn of the runs it holds), the history
    store (each closed run's whole record) and the segments after the
    checkpoint. A `LimitSet` belongs to no run: the checkpoint holds the latest
    of each limit as its name, its size and its lsn (`[R.LimitSet, name,
    permits]` here, without `set_at`, until a segment gives the whole record);
    a `QueueSet` neither, held so as its queue's sizes (`[R.QueueSet, name,
    concurrency, per_key]`).
    The same lsn may be in two of them (a run closed before the
    checkpoint and stored since); it must be the same record. Segments compaction
    has not deleted yet may also hold records up to the checkpoint's lsn: each of
    those must be in the checkpoint or the history store, as the same record,
    or the engine (which reads neither) has lost it.

    With a PostgreSQL `store`, the checkpoint and the records come from its tables
    (the rows compaction has not deleted play the segments' part).
    """
    directory = home / "journal"
    if store is None and not directory.exists():
        return Read([], False, [])
    held: dict[int, tuple[list[Any], str]] = {}
    disagreements: list[str] = []

    def hold(lsn: int, rec: list[Any], where: str) -> None:
        had, there = held.setdefault(lsn, (rec, where))
        size = SIZES.get(rec[0]) if rec[0] == had[0] else None  # the checkpoint's: no set_at
        if (had[:size] != rec[:size]) if size else (had != rec):
            disagreements.append(
                f"record {lsn}: {there} holds {_short(had)}, {where} {_short(rec)}"
            )
        elif len(rec) > len(had):
            held[lsn] = (rec, where)

    base = newest_checkpoint(directory) if store is None else _pg_checkpoint(store)
    after = base.lsn if base is not None else 0
    # The lsn of each size the checkpoint holds, by (R.LimitSet or R.QueueSet, name).
    sizes: dict[tuple[Any, Any], int] = {}
    if base is not None:
        for _, recs in base.body["runs"]:
            for lsn, rec in recs:
                hold(lsn, rec, f"checkpoint {base.path.name}")
        held_sizes = [
            (R.LimitSet, "limit", name, [permits], lsn)
            for name, (permits, lsn) in base.body["limits"].items()
        ] + [
            (R.QueueSet, "queue", name, [concurrency, per_key], lsn)
            for name, (concurrency, per_key, lsn) in base.body.get("queues", {}).items()
        ]
        for kind, what, name, size, lsn in held_sizes:
            if lsn > after:
                disagreements.append(
                    f"record {lsn}: checkpoint {base.path.name} holds it as {what} {name}'s "
                    f"size, though it comes after the checkpoint ({after})"
                )
            sizes[(kind, name)] = lsn
            hold(lsn, [kind, name, *size], f"checkpoint {base.path.name}")
    stored: dict[str, int] = defaultdict(int)
    for workflow_id, recs in _stored(home) if store is None else _pg_stored(store):
        stored[workflow_id] += 1
        for lsn, rec in recs:
            hold(lsn, rec, history.NAME)
    # From the first segment left, not just those after the checkpoint: the older
    # ones' records are compared with the checkpoint and the store.
    if store is None:
        heads = [first for _, first in first_lsns(directory, Storage()) if first is not None]
        scan = recover(directory, Storage(), repair=False, after=heads[0] - 1 if heads else 0)
        kept, cut, end = scan.records, scan.cut is not None, scan.tail.next_lsn - 1
    else:
        kept, cut = _pg_rows(store), False
        heads = [kept[0][0]] if kept else []
        end = kept[-1][0] if kept else 0
    if heads and heads[0] > after + 1:
        disagreements.append(
            f"records {after + 1} to {heads[0] - 1}: compacted, though no checkpoint holds them"
        )
    if end < after:
        disagreements.append(f"the segments end at record {end}, before the checkpoint ({after})")
    superseded: list[tuple[int, list[Any]]] = []
    for lsn, payload in kept:
        rec = decode(payload)
        if lsn > after:
            hold(lsn, rec, "the segments")
        elif lsn in held:
            hold(lsn, rec, "a segment before the checkpoint")
        elif rec[0] in SIZES and sizes.get((rec[0], rec[1]), 0) > lsn:
            hold(lsn, rec, "a segment before the checkpoint")  # a later size replaced it
        elif rec[0] == R.StepHeartbeat:
            superseded.append((lsn, rec))  # if a later heartbeat of its step is held
            hold(lsn, rec, "a segment before the checkpoint")
        else:
            disagreements.append(
                f"record {lsn}: in a segment before the checkpoint ({after}), in neither it "
                f"nor {history.NAME}: {_short(rec)}"
            )
    # A run keeps only the latest heartbeat record of each step, numbered: the records
    # numbered before it are superseded, and may be gone with their segments.
    beats: dict[tuple[str, str], list[int]] = defaultdict(list)
    for rec, _ in held.values():
        if rec[0] == R.StepHeartbeat:
            beats[(rec[1], rec[2])].append(rec[7])
    for lsn, rec in superseded:
        if rec[7] >= max(beats[(rec[1], rec[2])]):
            disagreements.append(
                f"record {lsn}: in a segment before the checkpoint ({after}), in neither it "
                f"nor {history.NAME}, though no later heartbeat supersedes it: {_short(rec)}"
            )
    gone = sum(max(numbers) - len(set(numbers)) for numbers in beats.values())
    # Every record belongs to a run or is a LimitSet or QueueSet the checkpoint holds
    # (the workload has no schedules, and sets its limit and queue once, so no size
    # replaced another), so every lsn up to the last is in one place or another, but
    # for superseded heartbeats.
    missing = sorted(set(range(1, max(held, default=0) + 1)) - held.keys())
    if len(missing) != gone:
        disagreements.append(
            f"records {_spans(missing)}: in no checkpoint, store or segment "
            f"({gone} superseded heartbeats may be)"
        )
    # With FUSEE_KEYS set the whole torture runs encrypted: the values the checks read
    # are opened here, with the same keys (a key missing or wrong: the trial raises).
    chain = of_environment()
    records = [
        [chain.opened_value(v) if is_envelope(v) else v for v in rec]
        for _, (rec, _) in sorted(held.items())
    ]
    elsewhere = sum(1 for lsn in held if not heads or lsn < heads[0])
    return Read(records, cut, disagreements, elsewhere, dict(stored))


SIZES = {R.LimitSet: 3, R.QueueSet: 4}
"""The records of no run that a checkpoint holds as sizes: how much of each it holds
(its kind, name and size, without `set_at`)."""


def _spans(lsns: list[int]) -> str:
    """`[1, 2, 3, 7]` as `1-3, 7`."""
    spans: list[list[int]] = []
    for lsn in lsns:
        if spans and spans[-1][1] == lsn - 1:
            spans[-1][1] = lsn
        else:
            spans.append([lsn, lsn])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def newest_checkpoint(directory: Path) -> ckpt.Checkpoint | None:
    """As the engine chooses it: the newest that reads whole."""
    return ckpt.newest(directory, Storage())[0]


def _pg_checkpoint(store: str) -> ckpt.Checkpoint | None:
    """As the engine chooses it in PostgreSQL: the newest that reads whole."""
    import psycopg

    with psycopg.connect(store) as conn:
        if not _has_tables(conn):
            return None  # killed before its first open made them
        rows = conn.execute(
            "SELECT lsn, body FROM fusee_checkpoints WHERE NOT damaged ORDER BY lsn DESC"
        ).fetchall()
    for lsn, body in rows:
        with contextlib.suppress(ckpt.CheckpointDamaged):
            return ckpt.decode(Path(f"fusee_checkpoints/{lsn}"), bytes(body))
    return None


def _pg_rows(store: str) -> list[tuple[int, bytes]]:
    """Every (lsn, payload) `fusee_journal` holds, in order, gaps and all."""
    import psycopg

    with psycopg.connect(store) as conn:
        if not _has_tables(conn):
            return []
        rows = conn.execute("SELECT lsn, record FROM fusee_journal ORDER BY lsn").fetchall()
    return [(lsn, bytes(record)) for lsn, record in rows]


def _has_tables(conn: Any) -> bool:
    """Whether fusee made its tables in the store yet (the schema is made on first open)."""
    row = conn.execute("SELECT to_regclass('fusee_journal') IS NOT NULL").fetchone()
    return bool(row[0])


def _pg_stored(store: str) -> list[tuple[str, list[list[Any]]]]:
    """(workflow id, [[lsn, record], ...]) of every run in `fusee_runs`."""
    import psycopg

    with psycopg.connect(store) as conn:
        if not conn.execute("SELECT to_regclass('fusee_runs') IS NOT NULL").fetchone()[0]:
            return []
        rows = conn.execute("SELECT workflow_id, records FROM fusee_runs").fetchall()
    return [(workflow_id, orjson.loads(records)) for workflow_id, records in rows]


def _stored(home: Path) -> list[tuple[str, list[list[Any]]]]:
    """(workflow id, [[lsn, record], ...]) of every run in the history store."""
    path = home / history.NAME
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT workflow_id, records FROM runs").fetchall()
    finally:
        db.close()
    return [(workflow_id, orjson.loads(records)) for workflow_id, records in rows]


def _short(rec: list[Any]) -> str:
    text = orjson.dumps(rec).decode()
    return text if len(text) <= 160 else text[:157] + "..."


def _ledger(path: Path) -> list[dict[str, Any]]:
    """The ledger's lines; one a SIGKILL cut short is left out: its step function
    never returned, so no result of it can have been recorded."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if not line:
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            if line.startswith(b"{") and not line.endswith(b"}"):
                continue
            raise
    return out


def check(report: Report, evidence: Evidence) -> None:
    """Adds to `report` what the evidence counts, and every violation it shows."""
    planned, seen, finals = evidence.planned, evidence.seen, evidence.finals
    journal = evidence.journal
    ledger = [line for line in evidence.ledger if "edge" not in line]  # executions
    v = report.violations
    v.extend(evidence.disagreements)
    wids = _wids(journal, evidence.after_crash, seen.fault_records or [])
    starts: dict[str, int] = defaultdict(int)
    signals: dict[str, list[Any]] = defaultdict(list)
    for rec in journal:
        if rec[0] == R.RunStarted:
            starts[rec[2]] += 1
        elif rec[0] == R.SignalReceived and rec[3] == "go":
            signals[wids.get(rec[1], "?")].append(rec[4])
    report.runs = len(finals)
    for wid in sorted(seen.started - set(finals)):
        v.append(f"{wid}: its start was acknowledged, the recovered home has no such run")
    for wid, n in starts.items():
        if n != 1:
            v.append(f"{wid}: started {n} times")
    for wid, result in sorted(finals.items()):
        if wid not in planned:
            continue  # a box: `_check_boxes`
        want = torture_app.expected(wid, planned[wid])
        if result != want:
            v.append(f"{wid}: final result {result}, a run without crashes gives {want}")
        if wid in seen.results and seen.results[wid] != result:
            v.append(f"{wid}: result {seen.results[wid]} read before the kill, {result} after")
        if planned[wid]["signal"]:
            report.signals += 1
            if signals[wid] != [torture_app.signal_value(wid)]:
                v.append(f"{wid}: signal delivered as {signals[wid]}, once expected")
    for wid in sorted(seen.signaled - set(finals)):
        v.append(f"{wid}: its signal was acknowledged, the run is gone")
    # At the end every run is closed, and the clean close moved each to the store once.
    for wid in sorted(set(finals) | set(evidence.stored)):
        if evidence.stored.get(wid, 0) != 1:
            v.append(f"{wid}: {evidence.stored.get(wid, 0)} rows in the history store at the end")
    _check_children(report, evidence, wids)
    _check_limits(report, evidence)
    _check_updates(report, evidence, wids)
    _check_counter(report, evidence)
    _check_queues(report, evidence, wids)
    _check_boxes(report, evidence, wids)
    # A step's progress only goes up: each attempt goes on after the last row it finds.
    rows: dict[tuple[str, str], int] = {}
    for rec in journal:
        if rec[0] == R.StepHeartbeat:
            report.heartbeats += 1
            key, row = (rec[1], rec[2]), rec[5]["row"]
            if row <= rows.get(key, -1):
                v.append(
                    f"{wids.get(rec[1], '?')} step {rec[3]}: progress went from row "
                    f"{rows[key]} back to {row}"
                )
            rows[key] = row
    # Nothing whose write or sync failed was acknowledged.
    for rec in seen.fault_records or []:
        if rec[0] == R.RunStarted and rec[2] in seen.started:
            v.append(f"{rec[2]}: its start was acknowledged, though its write failed")
        elif rec[0] == R.SignalReceived and rec[3] == "go" and wids.get(rec[1]) in seen.signaled:
            v.append(f"{wids[rec[1]]}: its signal was acknowledged, though its write failed")
        elif rec[0] == R.SignalReceived and wids.get(rec[1]) in seen.closed and rec[3] == "close":
            v.append(f"{wids[rec[1]]}: its close was acknowledged, though its write failed")
        elif rec[0] == R.RunCompleted and wids.get(rec[1]) in seen.results:
            v.append(f"{wids[rec[1]]}: its result was read, though its write failed")
        elif rec[0] == R.LimitSet and seen.limit_set:
            v.append(f"limit {rec[1]}: its size was acknowledged, though its write failed")
        elif rec[0] == R.QueueSet and seen.queue_set:
            v.append(f"queue {rec[1]}: its sizes were acknowledged, though their write failed")
        elif rec[0] == R.UpdateApplied and wids.get(rec[1]) in seen.updated:
            v.append(f"{wids[rec[1]]}: its update's result was read, though its write failed")
    # What the child acknowledged was in the journal the crash left.
    crash = evidence.after_crash
    crash_wids = _wids(crash)
    for wid in sorted(seen.started - set(crash_wids.values())):
        v.append(f"{wid}: its start was acknowledged, the journal after the crash lacks it")
    crash_signaled = {
        crash_wids.get(r[1]) for r in crash if r[0] == R.SignalReceived and r[3] == "go"
    }
    for wid in sorted(seen.signaled - crash_signaled):
        v.append(f"{wid}: its signal was acknowledged, the journal after the crash lacks it")
    crash_results = {crash_wids.get(r[1]): r[2] for r in crash if r[0] == R.RunCompleted}
    for wid, value in sorted(seen.results.items()):
        if crash_results.get(wid) != value:
            v.append(f"{wid}: its result was read, the journal after the crash lacks it")
    crash_updated = {crash_wids.get(r[1]): r[6] for r in crash if r[0] == R.UpdateApplied}
    for wid, value in sorted(seen.updated.items()):
        if wid not in crash_updated or crash_updated[wid] != value:
            v.append(f"{wid}: its update's result was read, the journal after the crash lacks it")
    crash_closed = {
        crash_wids.get(r[1])
        for r in crash
        if r[0] == R.SignalReceived and r[3] == torture_app.CLOSE
    }
    for wid in sorted(seen.closed - crash_closed):
        v.append(f"{wid}: its close was acknowledged, the journal after the crash lacks it")
    if seen.limit_set and not any(r[0] == R.LimitSet for r in crash):
        v.append(
            f"limit {torture_app.LIMIT}: its size was acknowledged, the journal after the "
            "crash lacks it"
        )
    if seen.queue_set and not any(r[0] == R.QueueSet for r in crash):
        v.append(
            f"queue {torture_app.QUEUE}: its sizes were acknowledged, the journal after the "
            "crash lacks them"
        )
    # The ledger against the journal.
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    keys_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in ledger:
        by_key[line["key"]].append(line)
        keys_of[(line["run"], line["name"])].add(line["key"])
    for (run, name), keys in sorted(keys_of.items()):
        if len(keys) != 1:
            v.append(f"step {name} of run {run}: ran under {len(keys)} keys {sorted(keys)}")
    # A step that ran in the first life proves every earlier record of its run was
    # durable (a step runs only then): none of the run's earlier steps may run again.
    reached: dict[str, int] = {}
    for line in ledger:
        if line["pid"] == seen.pid:
            reached[line["run"]] = max(reached.get(line["run"], 0), _top(line["key"]))
    for line in ledger:
        if ".u" in line["key"]:
            # An update's step runs beside the code, which may go on past it before
            # its result is durable: a later step proves nothing of it.
            continue
        if line["pid"] != seen.pid and _top(line["key"]) < reached.get(line["run"], 0):
            v.append(
                f"{line['key']} ({line['name']}): ran again after the crash, though a later "
                "step had run, so its result was durable"
            )
    for rec in journal:
        if rec[0] != R.StepCompleted:
            continue
        report.steps += 1
        run_id, seq, name, value = rec[1], rec[2], rec[3], rec[4]
        if name == f"{torture_app.COUNTER}.incr":
            continue  # (the call to the counter object: `_check_counter` checks it)
        key = f"{wids.get(run_id, '?')}/{run_id}/{seq}"
        runs = by_key.get(key, [])
        nonces = [line["nonce"] for line in runs]
        if value["nonce"] not in nonces:
            v.append(f"{key} ({name}): the recorded execution is not in the ledger")
        elif nonces[-1] != value["nonce"]:
            after = len(nonces) - 1 - nonces.index(value["nonce"])
            v.append(f"{key} ({name}): ran {after} more time(s) after its result was recorded")


def _check_children(report: Report, evidence: Evidence, wids: dict[str, str]) -> None:
    """Each child recorded by its parent once, started once (the run the parent
    recorded), its close given to its parent once; each orphan (parent_close
    "terminate") terminated once, by its parent's close."""
    v, journal = report.violations, evidence.journal
    recorded: dict[str, list[str]] = defaultdict(list)
    runs_of: dict[str, list[str]] = defaultdict(list)
    closes: dict[tuple[str, str], int] = defaultdict(int)
    terminated: dict[str, list[str]] = defaultdict(list)
    for rec in journal:
        if rec[0] == R.ChildStarted:
            recorded[rec[3]].append(rec[4])
        elif rec[0] == R.RunStarted:
            runs_of[rec[2]].append(rec[1])
        elif rec[0] == R.ChildClosed:
            closes[(rec[1], rec[2])] += 1
        elif rec[0] == R.RunTerminated:
            terminated[wids.get(rec[1], "?")].append(rec[2])
    for child, run_ids in sorted(recorded.items()):
        report.children += 1
        if len(run_ids) != 1:
            v.append(f"{child}: its start recorded {len(run_ids)} times by its parent")
        elif runs_of.get(child) != run_ids:
            v.append(f"{child}: runs {runs_of.get(child)}, its parent recorded {run_ids}")
    for (parent, seq), n in sorted(closes.items()):
        if n != 1:
            v.append(f"child #{seq} of run {parent}: its close given to the parent {n} times")
    for wid, inp in sorted(evidence.planned.items()):
        if wid not in evidence.finals:
            continue
        for j in range(inp["kids"]):
            if f"{wid}#kid{j}" not in recorded:
                v.append(f"{wid}: completed without starting child {wid}#kid{j}")
        reasons = terminated.get(f"{wid}#orphan", [])
        if inp["orphan"] and (len(reasons) != 1 or f"its parent {wid!r}" not in reasons[0]):
            v.append(f"{wid}#orphan: terminated {len(reasons)} times ({reasons}), once expected")


def _check_counter(report: Report, evidence: Evidence) -> None:
    """The counter object (`torture_app.COUNTER`), after the crash and at the end: each
    run's call accepted once and applied once (its caller's step run again after a
    crash sends the same update id), and at the end every run that completed reached it."""
    v = report.violations
    workflow = OBJECT_PREFIX + torture_app.COUNTER
    for when, journal in (
        ("after the crash", evidence.after_crash),
        ("at the end", evidence.journal),
    ):
        runs = {r[1] for r in journal if r[0] == R.RunStarted and r[3] == workflow}
        accepted = [r for r in journal if r[0] == R.UpdateAccepted and r[1] in runs]
        applied = [r for r in journal if r[0] == R.UpdateApplied and r[1] in runs]
        callers = Counter(r[4] for r in accepted)
        for caller, n in sorted(callers.items()):
            if n > 1:
                v.append(f"{caller}: reached the counter object {n} times ({when})")
        for uid, n in sorted(Counter(r[2] for r in applied).items()):
            if n > 1:
                v.append(f"counter call {uid}: applied {n} times ({when})")
        if when != "at the end":
            continue
        if len(runs) > 1:
            v.append(f"the counter object has {len(runs)} runs, one expected")
        calls = {
            w for w, inp in evidence.planned.items() if inp.get("count") and w in evidence.finals
        }
        for wid in sorted(calls - set(callers)):
            v.append(f"{wid}: completed, its call never reached the counter object")
        for caller in sorted(set(callers) - calls):
            v.append(f"{caller}: reached the counter object, though no completed run calls it")
        if len(applied) != len(accepted):
            v.append(f"the counter object: {len(accepted)} calls accepted, {len(applied)} applied")
        report.counted = len(calls)


BEFORE_ADMITTED = {R.RunStarted, R.SignalReceived}
"""What a queued run's journal may hold before its queue lets it in: its start, and
signals (kept for it: no code of it runs to wait for them yet)."""


def _check_queues(report: Report, evidence: Evidence, wids: dict[str, str]) -> None:
    """The queued runs (`torture_app.QUEUE`: one run at a time per key), after the crash
    and at the end.

    In the journal: each queued run started in its queue, under its key, and let in
    (`RunAdmitted`) at most once (once at the end), no other run ever; nothing of its
    code recorded before it was let in; the runs of a key let in in the order they
    started, none while another of its key was let in and not closed.

    In the ledger (both lives): a run is inside from its first `begin` line to its
    last `end` line: a step run again after a crash may write either twice (its side
    effect happened, its record was lost), and no other run of its key may begin in
    between, as the run holds its place until its close. No two runs of a key are
    inside at once; the runs of each key first began in the order they started; a
    run that began in the first life had its `RunAdmitted` in the journal the crash
    left (it is durable before the code's first step runs). At the end each queued
    run completed (its result is checked as every run's) and wrote both lines.

    The queue as a life found it once every run had closed: no place held, no run
    waiting; its sizes as the first life set them (once, durably, before it started
    any run)."""
    v, seen = report.violations, evidence.seen
    queue, per_key = torture_app.QUEUE, torture_app.QUEUE_PER_KEY
    keyed = {w: inp["queue_key"] for w, inp in evidence.planned.items() if inp.get("queue_key")}
    started: dict[str, list[str]] = {}  # by key, at the end: in the order they started
    admitted_in_crash: set[str] = set()
    for when, journal in (
        ("after the crash", evidence.after_crash),
        ("at the end", evidence.journal),
    ):
        of_run = _wids(journal)
        order: dict[str, list[str]] = defaultdict(list)  # by key: in the order started
        let_in: dict[str, list[str]] = defaultdict(list)  # by key: in the order let in
        admits: Counter[str] = Counter()
        inside: dict[str, str] = {}  # by key: the run let in and not closed yet
        at: dict[str, tuple[int, int]] = {}  # by run: where it started, and closed
        early: set[str] = set()  # runs with code recorded before they were let in
        for i, rec in enumerate(journal):
            kind = rec[0]
            wid = of_run.get(rec[1]) if len(rec) > 1 and isinstance(rec[1], str) else None
            if wid is None:
                continue
            key = keyed.get(wid)
            if kind == R.RunStarted:
                origin = rec[7] if len(rec) > 7 and isinstance(rec[7], dict) else {}
                spec = origin.get("queue")
                want = {"name": queue, "key": key, "priority": 0} if key else None
                if spec != want:
                    v.append(f"{wid}: started in queue {spec}, {want} expected ({when})")
                if key:
                    order[key].append(wid)
                    at[wid] = (i, len(journal))
            elif kind == R.RunAdmitted:
                admits[wid] += 1
                if key is None:
                    v.append(f"{wid}: let in by a queue, though started in none ({when})")
                    continue
                if admits[wid] > 1:
                    continue  # (said below)
                other = inside.setdefault(key, wid)
                if other != wid:
                    v.append(f"{wid}: let in while {other} of key {key} was inside ({when})")
                let_in[key].append(wid)
            elif key is None:
                continue
            elif kind in CLOSES:
                if inside.get(key) == wid:
                    del inside[key]
                at[wid] = (at.get(wid, (i, i))[0], i)
            elif not admits[wid] and kind not in BEFORE_ADMITTED and wid not in early:
                early.add(wid)  # (said once: what follows is its code's too)
                v.append(f"{wid}: {R(kind).name} recorded before its queue let it in ({when})")
        for key, ids in sorted(let_in.items()):
            if ids != order[key][: len(ids)]:
                v.append(f"key {key}: runs let in as {ids}, started as {order[key]} ({when})")
        for wid, n in sorted(admits.items()):
            if n > 1:
                v.append(f"{wid}: let in by its queue {n} times ({when})")
        if when == "after the crash":
            admitted_in_crash = set(admits)
            continue
        started = order
        for wid in sorted(keyed.keys() & evidence.finals.keys()):
            report.queued += 1
            if admits[wid] != 1:
                v.append(f"{wid}: completed, let in by its queue {admits[wid]} times")
        for ids in let_in.values():  # those started while the one before them was inside
            report.waited += sum(at[b][0] < at[a][1] for a, b in itertools.pairwise(ids))
    # The ledger: each run's first begin and last end line, in both lives.
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    began: dict[str, list[str]] = defaultdict(list)  # by key: in the order they first began
    for n, line in enumerate(evidence.ledger):
        if "queued" not in line:
            continue
        wid, key = wids.get(line["run"], line["key"].split("/")[0]), line["queue_key"]
        if keyed.get(wid) != key:
            v.append(f"ledger line {n}: {wid} wrote {line['queued']} under key {key}")
        if line["queued"] == "begin":
            if wid in last:
                v.append(f"ledger line {n}: {wid} began again after it ended (line {last[wid]})")
            if wid not in first:
                first[wid] = n
                began[key].append(wid)
            if line["pid"] == seen.pid and wid not in admitted_in_crash:
                v.append(
                    f"{wid}: began in the first life (ledger line {n}), the journal after the "
                    "crash does not hold it let in"
                )
        elif wid not in first:
            v.append(f"ledger line {n}: {wid} ended without beginning")
        else:
            last[wid] = n
    for key, ids in sorted(began.items()):
        holder, until = "", -1
        for wid in ids:  # in the order they first began
            if first[wid] < until:
                v.append(
                    f"key {key}: {wid} began (ledger line {first[wid]}) while {holder} was "
                    f"inside (lines {first[holder]} to {until})"
                )
            end = last.get(wid, len(evidence.ledger))  # (no end: inside till the last line)
            if end > until:
                holder, until = wid, end
        in_order = [w for w in started.get(key, []) if w in first]
        if ids != in_order:
            v.append(f"key {key}: runs first began as {ids}, started as {in_order}")
    for wid in sorted(keyed.keys() & evidence.finals.keys()):
        if wid not in first or wid not in last:
            v.append(f"{wid}: completed, its ledger has no begin or no end line")
    if not torture_app.QUEUEING:
        return
    sets = [r for r in evidence.journal if r[0] == R.QueueSet]
    if len(sets) > 1:
        v.append(f"queue {queue}: set {len(sets)} times, once expected")
    lives = [("the first life", seen.queues), ("the last life", evidence.queues)]
    for life, queues in lives:
        for info in queues or []:
            if info["running"] or info["queued"]:
                v.append(
                    f"{life}, every run closed, queue {info['name']}: {info['running']} run(s) "
                    f"in, {info['queued']} waiting (a place leaked)"
                )
    # The first life started runs only once the sizes were durable.
    due = [("the first life", seen.queues)] if seen.queues is not None else []
    if seen.queue_set or evidence.finals:
        due.append(("the last life", evidence.queues))
    for life, queues in due:
        found = [
            (i["concurrency"], i["per_key"], i["set"]) for i in queues or [] if i["name"] == queue
        ]
        if found != [(None, per_key, True)]:
            v.append(f"{life}, queue {queue}: found as {found}, [(None, {per_key}, True)] expected")


def _check_updates(report: Report, evidence: Evidence, wids: dict[str, str]) -> None:
    """Each planned update accepted once and applied once, with the value a run without
    crashes gives; the result the child read before the kill is the one recorded,
    and the one the update sent again (the same id) after it got; its step completed
    once; the `CLOSE` signal that follows it received once."""
    v, seen = report.violations, evidence.seen
    accepted: dict[str, list[str]] = defaultdict(list)
    applied: dict[str, list[tuple[str, Any, Any]]] = defaultdict(list)
    closes: dict[str, int] = defaultdict(int)
    steps: dict[str, int] = defaultdict(int)
    for rec in evidence.journal:
        wid = wids.get(rec[1], "?") if len(rec) > 1 else "?"
        if rec[0] == R.UpdateAccepted:
            accepted[wid].append(rec[2])
        elif rec[0] == R.UpdateApplied:
            applied[wid].append((rec[2], rec[6], rec[7]))
        elif rec[0] == R.SignalReceived and rec[3] == torture_app.CLOSE:
            closes[wid] += 1
        elif rec[0] == R.StepCompleted and rec[3] == "u":
            steps[wid] += 1
    for wid, inp in sorted(evidence.planned.items()):
        if wid not in evidence.finals:
            continue
        if not inp["update"]:
            if accepted[wid] or applied[wid]:
                v.append(f"{wid}: updated, though it takes no update")
            continue
        report.updates += 1
        uid, want = torture_app.update_id(wid), inp["base"] + 400
        if accepted[wid] != [uid]:
            v.append(f"{wid}: update accepted as {accepted[wid]}, [{uid!r}] expected")
        if applied[wid] != [(uid, want, None)]:
            v.append(f"{wid}: update applied as {applied[wid]}, once with {want} expected")
        if steps[wid] != 1:
            v.append(f"{wid}: the update's step completed {steps[wid]} times, once expected")
        if closes[wid] != 1:
            v.append(f"{wid}: signal {torture_app.CLOSE!r} received {closes[wid]} times")
        for life, results in (("before the kill", seen.updated), ("after", evidence.updated)):
            if wid in results and results[wid] != want:
                v.append(f"{wid}: its update answered {results[wid]} {life}, {want} expected")


def _check_boxes(report: Report, evidence: Evidence, wids: dict[str, str]) -> None:
    """Every acknowledged update is applied exactly once, in its run's final result,
    after every update acknowledged before it was sent; no unacknowledged update is
    applied more than once (nor one never sent); each answer names the update's
    place in the result, which lists the updates in the order the journal applied
    them, each accepted once and applied once; an async update's step completed
    once, no execution of it came after the one recorded (the ledger), and its answer
    names that one; and each update the child saw answered is in the journal the crash
    left, none whose write failed."""
    v, seen, boxes = report.violations, evidence.seen, evidence.boxes
    events = [*seen.box, *evidence.box_after]
    sent_at: dict[str, int] = {}  # the first time each was sent, answered, in `events`
    answered_at: dict[str, int] = {}
    answers: dict[str, list[Any]] = defaultdict(list)
    sent_to: dict[str, list[str]] = defaultdict(list)
    for i, (word, wid, uid, answer) in enumerate(events):
        if word == "sent" and uid not in sent_at:
            sent_at[uid] = i
            sent_to[wid].append(uid)
        elif word == "answered":
            answered_at.setdefault(uid, i)
            answers[uid].append(answer)
    report.reopened = seen.reopened_at is not None
    after = seen.box[seen.reopened_at :] if seen.reopened_at is not None else []
    report.after_reopen = sum(word == "answered" for word, *_ in after)
    kinds = {send["id"]: send["kind"] for inp in boxes.values() for send in inp["sends"]}
    accepted: dict[str, list[str]] = defaultdict(list)
    applied: dict[str, list[str]] = defaultdict(list)
    recorded: dict[str, list[str]] = defaultdict(list)  # each update's step: its nonces
    for rec in evidence.journal:
        wid = wids.get(rec[1], "?") if len(rec) > 1 and isinstance(rec[1], str) else "?"
        if wid not in boxes:
            continue
        if rec[0] == R.UpdateAccepted:
            accepted[wid].append(rec[2])
        elif rec[0] == R.UpdateApplied:
            applied[wid].append(rec[2])
        elif rec[0] == R.StepCompleted and rec[3] == "add":
            recorded[rec[4]["v"]].append(rec[4]["nonce"])
    ran: dict[str, list[str]] = defaultdict(list)  # each update's step: its executions
    keys: dict[str, set[str]] = defaultdict(set)
    for line in evidence.ledger:
        if "update" in line:
            ran[line["update"]].append(line["nonce"])
            keys[line["update"]].add(line["key"])
    in_the_crash = {r[2] for r in evidence.after_crash if r[0] == R.UpdateApplied}
    failed = {r[2] for r in seen.fault_records or [] if r[0] == R.UpdateApplied}
    child_answered = {uid for word, _, uid, _ in seen.box if word == "answered"}
    for wid in sorted(boxes):
        mine = sent_to.get(wid, [])
        acked = [uid for uid in mine if uid in answered_at]
        if wid not in evidence.finals:
            if acked:
                v.append(f"{wid}: its updates {acked} were answered, the run is gone")
            continue
        report.boxes += 1
        report.box_updates += len(acked)
        report.box_unanswered += len(mine) - len(acked)
        result = evidence.finals[wid]
        for uid in sorted({*mine, *result}):
            n = result.count(uid)
            if uid not in sent_at:
                v.append(f"{wid}: update {uid} is in its result {result}, though never sent")
            elif uid in answered_at and n != 1:
                v.append(
                    f"{wid}: update {uid} was acknowledged, its result {result} holds it "
                    f"{n} times, once expected"
                )
            elif n > 1:
                v.append(
                    f"{wid}: update {uid} was not acknowledged, its result {result} holds it "
                    f"{n} times, at most once expected"
                )
        for uid in acked:
            for answer in answers[uid]:
                at = answer if kinds.get(uid) == torture_app.PUT else (answer or {}).get("at")
                if not (isinstance(at, int) and 0 < at <= len(result) and result[at - 1] == uid):
                    v.append(f"{wid}: update {uid} answered {answer}, its result is {result}")
            for later in mine:
                if sent_at[later] < answered_at[uid] or result.count(later) != 1:
                    continue
                if result.count(uid) == 1 and result.index(uid) > result.index(later):
                    v.append(
                        f"{wid}: update {uid} was acknowledged before {later} was sent, its "
                        f"result {result} holds it after"
                    )
        if result != applied[wid]:
            v.append(f"{wid}: its result is {result}, its journal applied {applied[wid]}")
        for uid in sorted({*accepted[wid], *applied[wid]}):
            times = (accepted[wid].count(uid), applied[wid].count(uid))
            once = (0, 1) if kinds.get(uid) == torture_app.PUT else (1, 1)  # a plain one: no
            if times != once:  # `UpdateAccepted`
                v.append(
                    f"{wid}: update {uid} accepted {times[0]} and applied {times[1]} times in "
                    f"its journal, {once[0]} and {once[1]} expected"
                )
        for uid in sorted(set(applied[wid])):
            if kinds.get(uid) != torture_app.ADD:
                continue
            nonces, executions = recorded.get(uid, []), ran.get(uid, [])
            if len(nonces) != 1:
                v.append(f"{wid}: update {uid}: its step completed {len(nonces)} times")
                continue
            if nonces[0] not in executions:
                v.append(f"{wid}: update {uid}: its step's recorded execution is not in the ledger")
            elif executions[-1] != nonces[0]:
                again = len(executions) - 1 - executions.index(nonces[0])
                v.append(
                    f"{wid}: update {uid}: its step ran {again} more time(s) after its result "
                    "was recorded"
                )
            if len(keys[uid]) != 1:
                v.append(f"{wid}: update {uid}: its step ran under keys {sorted(keys[uid])}")
            for answer in answers.get(uid, []):
                if (answer or {}).get("nonce") != nonces[0]:
                    v.append(
                        f"{wid}: update {uid} answered {answer}, its step's recorded "
                        f"execution is {nonces[0]}"
                    )
        for uid in acked:
            if uid in child_answered and uid not in in_the_crash:
                v.append(f"{wid}: update {uid} was answered, the journal after the crash lacks it")
            if uid in child_answered and uid in failed:
                v.append(f"{wid}: update {uid} was answered, though its write failed")


def _check_limits(report: Report, evidence: Evidence) -> None:
    """Per process life, at most the limit's size of limited steps inside at once
    (their `enter` and `leave` ledger lines are written inside the permit, so the
    lines count no more than held one); once every run closed, no permit in use
    and no step waiting, in any limit; the limit set once, durably, before any
    run started, so found with its size wherever a run is."""
    v, seen = report.violations, evidence.seen
    name, size = torture_app.LIMIT, torture_app.LIMIT_PERMITS
    inside: dict[int, list[str]] = defaultdict(list)  # by pid: the keys inside
    most: dict[int, int] = defaultdict(int)
    for line in evidence.ledger:
        if "edge" not in line:
            continue
        pid, keys = line["pid"], inside[line["pid"]]
        if line["edge"] == "enter":
            report.entered += 1
            keys.append(line["key"])
            if len(keys) > size and len(keys) > most[pid]:
                v.append(
                    f"life {pid}: {len(keys)} limited steps inside at once "
                    f"({', '.join(keys)}), over limit {name}'s size of {size}"
                )
            most[pid] = max(most[pid], len(keys))
        elif line["key"] in keys:
            keys.remove(line["key"])
        else:
            v.append(f"life {pid}: {line['key']} left limit {name} without entering it")
    report.crowded = sum(n == size for n in most.values())
    report.limited = sum(
        1 for r in evidence.journal if r[0] == R.StepCompleted and "limited" in r[3]
    )
    sets = [r for r in evidence.journal if r[0] == R.LimitSet]
    if len(sets) > 1:
        v.append(f"limit {name}: set {len(sets)} times, once expected")
    lives = [("the first life", seen.limits), ("the last life", evidence.limits)]
    for life, limits in lives:
        for info in limits or []:
            if info["in_use"] or info["waiting"]:
                v.append(
                    f"{life}, every run closed, limit {info['name']}: {info['in_use']} "
                    f"permit(s) in use, {info['waiting']} waiting (a permit leaked)"
                )
            if info["max_in_use"] > info["permits"]:
                v.append(
                    f"{life}, limit {info['name']}: {info['max_in_use']} permits in use at "
                    f"once, over its size of {info['permits']}"
                )
    # The first life started runs only once the size was durable.
    due = [("the first life", seen.limits)] if seen.limits is not None else []
    if seen.limit_set or evidence.finals:
        due.append(("the last life", evidence.limits))
    for life, limits in due:
        found = [(i["permits"], i["set"]) for i in limits or [] if i["name"] == name]
        if found != [(size, True)]:
            v.append(f"{life}, limit {name}: found as {found}, [({size}, True)] expected")


def _top(key: str) -> int:
    """The run-level operation number in a step's key (`<id>/<run>/<seq>`, a leg of
    a fan-out `<n>.<leg>`)."""
    top = re.match(r"\d+", key.rsplit("/", 1)[-1])
    return int(top.group()) if top else 0  # a malformed key is reported on its own


def workdir_for(base: Path, seed: int) -> Path:
    path = base / f"trial-{seed}"
    path.mkdir(parents=True, exist_ok=True)
    return path
