"""SIGKILL during a checkpoint write, during compaction and during the move to the
history store (issue 8): reopening loses nothing acknowledged and duplicates nothing.

A child (storage_child.py) runs a stream of short runs, a third of them waiting
for a signal, on a home with tiny sizes (a checkpoint every few dozen runs), and
kills itself with SIGKILL the n-th time it reaches the chosen point, announcing
it first; or the parent kills it after some number of results. Some tests run a
second child on the home, killed in its turn while it recovers. After each life
the parent checks what the crash left on disk (so the kill cannot have landed
somewhere else). Then it reopens the home in this process, delivers the signals
the journal lacks, runs every run to its end and checks:

- every start, signal and result a child acknowledged is there, the same;
- no step whose result was durable ran again (the ledger of executions);
- every run is in `engine.list()` and in the history store exactly once;
- the home opens a second time, after the reopen wrote its own checkpoint,
  with everything.
"""

from __future__ import annotations

import random
import re
import signal
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import storage_child
from harness import Child, entries

from fusee_runtime import Engine, Rejected, Status


@dataclass
class Seen:
    """What the children acknowledged before they died, and in which life (the
    index of the child's pid in `pids`; the parent's reopen comes after them all)."""

    pids: list[int] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    parked: dict[str, int] = field(default_factory=dict)
    """Waiting runs whose first step's result was durable, and the life that saw it."""
    signaled: dict[str, int] = field(default_factory=dict)
    results: dict[str, tuple[Any, int]] = field(default_factory=dict)
    """Each result read, and the life that read it."""
    kill: tuple[str, Any] | None = None
    """Where the last child killed itself, and what it was doing there."""


@dataclass(frozen=True)
class Life:
    """One life of the child: it dies at the `nth` arrival at `point`, or (point
    `none`) by the parent's SIGKILL once it has read `kill_after` results."""

    point: str
    nth: int = 0
    kill_after: int = 0

    def __str__(self) -> str:
        return f"{self.point} #{self.nth or self.kill_after}"


def live(home: Path, ledger: Path, life: Life, seen: Seen) -> None:
    """Runs one life of the child until it dies. Every line it wrote before dying
    counts."""
    first_run = 10_000 * len(seen.pids)  # each life starts runs of its own
    args = (life.point, str(life.nth), str(first_run))
    child = Child(home, ledger, script="storage_child.py", args=args)
    proc = child.proc
    assert proc.stdout is not None
    index = len(seen.pids)
    seen.pids.append(proc.pid)
    seen.kill = None
    results = 0
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        child.lines.append(line)
        word, _, rest = line.partition(" ")
        if word == "STARTED":
            seen.started.add(rest)
        elif word == "PARKED":
            seen.parked.setdefault(rest, index)
        elif word == "SIGNALED":
            workflow_id, value = rest.split()
            seen.signaled[workflow_id] = int(value)
        elif word == "RESULT":
            workflow_id, _, value = rest.partition(" ")
            seen.results.setdefault(workflow_id, (orjson.loads(value), index))
            results += 1
            if results == life.kill_after:
                proc.send_signal(signal.SIGKILL)
        elif word == "KILL":
            where, _, what = rest.partition(" ")
            seen.kill = (where, orjson.loads(what))
    proc.wait()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, (
        f"{life}: the child was not killed (exit {proc.returncode}): {child.lines[-1:]} "
        f"{child.stderr_path.read_text()}"
    )


def stored(home: Path) -> dict[str, list[str]]:
    """Run ids by workflow id, as the history store holds them (SQLite recovers its WAL)."""
    if not (home / "history.db").exists():
        return {}
    db = sqlite3.connect(home / "history.db")
    try:
        rows = db.execute("SELECT workflow_id, run_id FROM runs").fetchall()
    finally:
        db.close()
    out: dict[str, list[str]] = defaultdict(list)
    for workflow_id, run_id in rows:
        out[workflow_id].append(run_id)
    return out


def stored_run_ids(home: Path) -> set[str]:
    return {run_id for runs in stored(home).values() for run_id in runs}


def duplicates(home: Path) -> list[tuple[str, int]]:
    db = sqlite3.connect(home / "history.db")
    try:
        sql = "SELECT workflow_id, count(*) FROM runs GROUP BY workflow_id HAVING count(*) > 1"
        return db.execute(sql).fetchall()
    finally:
        db.close()


def where_it_died(home: Path, seen: Seen, point: str, stored_before: set[str]) -> None:
    """What the crash left on disk is what dying at `point` leaves (`stored_before`:
    the run ids in the history store when the life began)."""
    assert seen.kill is not None and seen.kill[0] == point, f"killed at {seen.kill}, not {point}"
    what = seen.kill[1]
    journal = home / "journal"
    if point == "ckpt-tmp-mid":
        assert (journal / what["path"]).stat().st_size == what["bytes"] // 2
        assert not (journal / what["path"].removesuffix(".tmp")).exists()
    elif point == "ckpt-before-rename":
        assert (journal / (what["path"] + ".tmp")).exists()
        assert not (journal / what["path"]).exists()
    elif point == "ckpt-after-rename":
        assert (journal / what["path"]).exists()
        assert not (journal / (what["path"] + ".tmp")).exists()
    elif point == "compact-before-remove":
        assert (journal / what["path"]).exists()
    elif point == "compact-after-remove":
        assert not (journal / what["path"]).exists()
    elif point == "history-before-commit":
        # A run moved again (closed in an earlier life) may be there from before.
        committed = (stored_run_ids(home) - stored_before) & set(what)
        assert what and not committed, "rows of the killed batch were committed"
    elif point == "history-after-commit":
        assert what and set(what) <= stored_run_ids(home), "the killed batch was not committed"


def _top(key: str) -> int:
    """The run-level operation number in a step's key (`<id>/<run>/<seq>`)."""
    return int(re.match(r"\d+", key.rsplit("/", 1)[-1]).group())  # type: ignore[union-attr]


def ran_again(
    ledger: list[dict[str, Any]], histories: dict[str, list[dict[str, Any]]], seen: Seen
) -> list[str]:
    """Step executions after the one whose result was durable, in words."""
    wrong = []
    by_key: dict[str, list[str]] = defaultdict(list)
    for line in ledger:
        by_key[line["key"]].append(line["nonce"])
    workflow_ids = {}
    for workflow_id, recs in histories.items():
        for rec in recs:
            if rec["type"] == "RunStarted":
                workflow_ids[rec["run_id"]] = workflow_id
            if rec["type"] != "StepCompleted":
                continue
            key = f"{workflow_id}/{rec['run_id']}/{rec['seq']}"
            nonces = by_key.get(key, [])
            if rec["value"]["nonce"] not in nonces:
                wrong.append(f"{key}: the recorded execution is not in the ledger")
            elif nonces[-1] != rec["value"]["nonce"]:
                wrong.append(f"{key}: ran again after its result was recorded")
    # A step runs only once its run's earlier results are durable, a waiting run is
    # announced only once its first step's is, and a result is read only once all
    # of the run is: no later life may run those steps again.
    lives = {pid: i for i, pid in enumerate(seen.pids)}

    def life(line: dict[str, Any]) -> int:
        return lives.get(line["pid"], len(seen.pids))  # else the parent's reopen

    proven: dict[str, list[tuple[int, int]]] = defaultdict(list)  # run: (life, top)
    for line in ledger:
        proven[line["run"]].append((life(line), _top(line["key"])))
    for line in ledger:
        now, top = life(line), _top(line["key"])
        if any(then < now and later > top for then, later in proven[line["run"]]):
            wrong.append(f"{line['key']}: ran again, though a later step of its run had run")
        workflow_id = workflow_ids.get(line["run"], "")
        if workflow_id in seen.results and seen.results[workflow_id][1] < now:
            wrong.append(f"{line['key']}: ran again, though its run's result had been read")
        if line["name"] == "a" and seen.parked.get(workflow_id, now) < now:
            wrong.append(f"{line['key']}: ran again, though its run had waited after it")
    return wrong


async def reopen_and_finish(home: Path, seen: Seen) -> tuple[dict[str, Any], list[str]]:
    """Opens the home, checks what the first life acknowledged, runs every run to its
    end; returns the results and the violations found."""
    wrong = []
    async with Engine(home, app=None, config=storage_child.CONFIG) as engine:
        # At once: the closed runs being moved again are in memory and in the store.
        ids = [info.id for info in await engine.list()]
        if len(ids) != len(set(ids)):
            wrong.append(f"engine.list() shows ids twice: {sorted(ids)}")
        for workflow_id in sorted(seen.started):
            await engine.handle(workflow_id).describe()  # NotFound if its start was lost
        unsignaled = []
        for workflow_id in sorted(set(ids)):
            recs = await engine.history(workflow_id)
            got = [r["value"] for r in recs if r["type"] == "SignalReceived"]
            if workflow_id in seen.signaled and got != [seen.signaled[workflow_id]]:
                wrong.append(f"{workflow_id}: acknowledged signal, the run received {got}")
            if storage_child.is_waiter(workflow_id) and not got:
                unsignaled.append(workflow_id)
        for workflow_id in unsignaled:
            try:
                await engine.signal(workflow_id, "go", storage_child.signal_value(workflow_id))
            except Rejected as e:
                wrong.append(f"{workflow_id}: no signal recorded, yet it closed ({e})")
        finals = {w: await engine.handle(w).result() for w in sorted(set(ids))}
        histories = {w: await engine.history(w) for w in finals}
        await engine.checkpoints.flush_history()
    for workflow_id, (value, _) in sorted(seen.results.items()):
        if finals.get(workflow_id) != value:
            wrong.append(f"{workflow_id}: result {value} read, {finals.get(workflow_id)} now")
    for workflow_id, value in sorted(finals.items()):
        want = storage_child.expected(workflow_id)
        if value != want:
            wrong.append(f"{workflow_id}: result {value}, a run without crashes gives {want}")
    wrong += ran_again(entries(home.parent / "ledger.jsonl"), histories, seen)
    return finals, wrong


async def reopen_again(home: Path, finals: dict[str, Any]) -> list[str]:
    """The home, closed by the first reopen (its checkpoint, its compaction), opens
    once more with every run, closed, once."""
    wrong = []
    async with Engine(home, app=None, config=storage_child.CONFIG) as engine:
        infos = await engine.list()
        if sorted(i.id for i in infos) != sorted(finals):
            wrong.append(f"second reopen lists {sorted(i.id for i in infos)}")
        if {i.status for i in infos} != {Status.COMPLETED}:
            wrong.append(f"second reopen: statuses {sorted({i.status for i in infos})}")
        for workflow_id, value in sorted(finals.items()):
            if await engine.handle(workflow_id).result() != value:
                wrong.append(f"{workflow_id}: a different result on the second reopen")
    return wrong


async def crash_and_check(tmp_path: Path, *lives: Life) -> None:
    """Runs the child's `lives` on one home, each killed as it says, then reopens the
    home here twice and checks everything."""
    home, ledger = tmp_path / "home", tmp_path / "ledger.jsonl"
    storage_child.LEDGER = str(ledger)
    seen = Seen()
    for life in lives:
        stored_before = stored_run_ids(home)
        live(home, ledger, life, seen)
        if life.point != "none":
            where_it_died(home, seen, life.point, stored_before)
    assert seen.started and seen.results and seen.signaled, "the child died before any work"
    where = " then ".join(map(str, lives))
    finals, wrong = await reopen_and_finish(home, seen)
    assert not wrong, f"{where}:\n" + "\n".join(wrong)
    assert set(finals) >= seen.started
    assert not list((home / "journal").glob("*.ckpt.tmp")), "a checkpoint's .tmp survived"
    assert not duplicates(home)
    missing = sorted(set(finals) - set(stored(home)))
    assert not missing, f"{where}: closed runs never moved to the history store: {missing}"
    executions = len(entries(ledger))
    wrong = await reopen_again(home, finals)
    assert not wrong, f"{where}:\n" + "\n".join(wrong)
    assert not duplicates(home)
    assert len(entries(ledger)) == executions, "a step ran on the second reopen"


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("ckpt-tmp-mid", 1),
        ("ckpt-tmp-mid", 5),
        ("ckpt-before-rename", 3),
        ("ckpt-after-rename", 4),
        ("compact-before-remove", 1),
        ("compact-before-remove", 3),
        ("compact-after-remove", 1),
        ("compact-after-remove", 2),
        ("history-before-commit", 2),
        ("history-before-commit", 5),
        ("history-after-commit", 1),
        ("history-after-commit", 4),
    ],
)
async def test_a_kill_at_a_storage_step_loses_and_duplicates_nothing(
    tmp_path: Path, point: str, nth: int
) -> None:
    await crash_and_check(tmp_path, Life(point, nth))


@pytest.mark.parametrize("seed", [1, 2])
async def test_a_kill_at_a_random_instant_loses_and_duplicates_nothing(
    tmp_path: Path, seed: int
) -> None:
    """The parent's SIGKILL after a random number of results, while runs close, are
    moved and checkpointed in volume."""
    await crash_and_check(tmp_path, Life("none", kill_after=random.Random(seed).randint(100, 600)))


@pytest.mark.parametrize(
    "lives",
    [
        # The second life's first batch holds the runs the first one closed that
        # its checkpoint or journal still hold, moved again on open (most of them
        # stored already).
        (Life("history-after-commit", 3), Life("history-after-commit", 1)),
        (Life("history-before-commit", 4), Life("history-before-commit", 1)),
        (Life("compact-after-remove", 1), Life("ckpt-tmp-mid", 1)),
    ],
    ids=lambda lives: "-then-".join(str(life).replace(" #", "-") for life in lives),
)
async def test_a_second_crash_while_recovering_from_the_first_loses_nothing(
    tmp_path: Path, lives: tuple[Life, ...]
) -> None:
    await crash_and_check(tmp_path, *lives)
