"""One torture trial: run the workload in a child, end it mid-work (a SIGKILL at a
random instant, or a fault its storage injects: a torn write, a full disk, a failed
`fdatasync`, short writes), recover the home in this process, run everything to
completion, and check the invariants.

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
- nothing in a batch whose write or sync failed was acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import Engine
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage

from . import torture_app

HERE = Path(__file__).parent

KILL_DELAY_S = 0.02
"""The parent's SIGKILL comes after a random number of results (so mid-work on a
machine of any speed), and then up to this much later."""

FAULT_WITHIN = 40
"""An injected fault comes at a uniformly random append write or sync up to this one
(a life makes 40 to 150 of each)."""

SILENCE_S = 120.0
"""A child that prints nothing for this long has hung: a violation, not a wait."""


@dataclass
class Report:
    seed: int
    fault: str = "kill"
    cut: bool = False
    """Whether recovery found a torn tail to cut (a batch the crash left half-written)."""
    killed: bool = False
    """Whether the first life ended mid-work (by the fault or the parent's SIGKILL),
    rather than after every run had finished or could do nothing more."""
    runs: int = 0
    steps: int = 0
    signals: int = 0
    violations: list[str] = field(default_factory=list)


@dataclass
class Seen:
    """What the child acknowledged before it died."""

    started: set[str] = field(default_factory=set)
    signaled: set[str] = field(default_factory=set)
    results: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    fault_records: list[list[Any]] | None = None
    """The records not yet durable when the storage injected its fault."""
    pid: int = 0
    """The child's: ledger lines of its life carry it."""


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


def trial(
    seed: int,
    workdir: Path,
    runs: int = 200,
    fault: str = "kill",
    between: Callable[[Path, Seen], None] | None = None,
) -> tuple[Report, Evidence]:
    """Runs trial `seed` in `workdir` (its home and ledger stay there), its first
    life ended by `fault` (one of `torture_app.FAULTS`).

    `between(workdir, seen)`, if given, runs after the kill and before recovery: the
    harness's own tests damage the home there, to see the check catch it.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    home, ledger = workdir / "home", workdir / "ledger"
    rng = random.Random(seed)
    report = Report(seed, fault)
    planned = dict(torture_app.plan(seed, runs))
    seen = _live(home, ledger, seed, planned, rng, report)
    if between is not None:
        between(workdir, seen)
    after_crash, report.cut = _journal(home)
    torture_app.LEDGER = str(ledger)
    finals = asyncio.run(_finish(home, planned, after_crash))
    evidence = Evidence(planned, seen, finals, _journal(home)[0], _ledger(ledger), after_crash)
    check(report, evidence)
    return report, evidence


def _live(
    home: Path,
    ledger: Path,
    seed: int,
    planned: dict[str, dict[str, Any]],
    rng: random.Random,
    report: Report,
) -> Seen:
    runs = len(planned)
    args = [str(seed), str(runs), report.fault, str(rng.randint(1, FAULT_WITHIN))]
    with open(ledger.with_name("child.err"), "wb") as err:
        child = subprocess.Popen(
            [sys.executable, str(HERE / "child.py"), str(home), str(ledger), *args],
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
    kill_after = rng.randint(0, runs * 4 // 5) if report.fault in ("kill", "short") else None
    heard = time.monotonic()
    sends: list[tuple[float, str]] = []  # (when, workflow id)
    eof = parent_killed = False
    while not eof:
        now = time.monotonic()
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
        if line.startswith("STARTED ") and planned[line.split()[1]]["signal"]:
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
    if report.killed and seen.done:
        report.killed = False  # the kill came after the end: not a crash mid-work
    if seen.fault_records is not None and report.fault != "short":
        report.killed = True
    killed_itself = report.fault == "torn" and seen.fault_records is not None
    expected_kill = child.returncode == -signal.SIGKILL and (parent_killed or killed_itself)
    if child.returncode != 0 and not expected_kill:
        tail = ledger.with_name("child.err").read_text(errors="replace").strip().splitlines()
        report.violations.append(
            f"the child died by itself (exit {child.returncode}): {tail[-1] if tail else ''}"
        )
    return seen


def _take(line: str, seen: Seen) -> None:
    word, _, rest = line.partition(" ")
    if word == "STARTED":
        seen.started.add(rest)
    elif word == "SIGNALED":
        seen.signaled.add(rest.split()[0])
    elif word == "RESULT":
        wid, _, value = rest.partition(" ")
        seen.results[wid] = orjson.loads(value)
    elif word == "DONE":
        seen.done = True
    elif word == "FAULT":
        seen.fault_records = orjson.loads(rest)


async def _finish(
    home: Path, planned: dict[str, dict[str, Any]], journal: list[list[Any]]
) -> dict[str, Any]:
    """Reopens the home, sends the signals its `journal` does not hold, runs every run
    to its end."""
    wids = _wids(journal)
    received = {wids[r[1]] for r in journal if r[0] == R.SignalReceived}
    async with Engine(home, app=None, config=torture_app.CONFIG) as engine:
        ids = {info.id for info in await engine.list()}
        for wid in sorted(ids):
            if planned[wid]["signal"] and wid not in received:
                await engine.signal(wid, "go", torture_app.signal_value(wid))
        results = await asyncio.gather(*(engine.handle(w).result() for w in sorted(ids)))
    return dict(zip(sorted(ids), results, strict=True))


def _wids(*journals: list[list[Any]]) -> dict[str, str]:
    """Workflow id by run id, from the RunStarted records."""
    return {r[1]: r[2] for journal in journals for r in journal if r[0] == R.RunStarted}


def _journal(home: Path) -> tuple[list[list[Any]], bool]:
    """The home's records, and whether recovery will cut a torn tail."""
    if not (home / "journal").exists():
        return [], False
    scan = recover(home / "journal", Storage(), repair=False)
    return [decode(p) for _, p in scan.records], scan.cut is not None


def _ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def check(report: Report, evidence: Evidence) -> None:
    """Adds to `report` what the evidence counts, and every violation it shows."""
    planned, seen, finals = evidence.planned, evidence.seen, evidence.finals
    journal, ledger = evidence.journal, evidence.ledger
    v = report.violations
    wids = _wids(journal, evidence.after_crash, seen.fault_records or [])
    starts: dict[str, int] = defaultdict(int)
    signals: dict[str, list[Any]] = defaultdict(list)
    for rec in journal:
        if rec[0] == R.RunStarted:
            starts[rec[2]] += 1
        elif rec[0] == R.SignalReceived:
            signals[wids.get(rec[1], "?")].append(rec[4])
    report.runs = len(finals)
    for wid in sorted(seen.started - set(finals)):
        v.append(f"{wid}: its start was acknowledged, the recovered home has no such run")
    for wid, n in starts.items():
        if n != 1:
            v.append(f"{wid}: started {n} times")
    for wid, result in sorted(finals.items()):
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
    # Nothing whose write or sync failed was acknowledged.
    for rec in seen.fault_records or []:
        if rec[0] == R.RunStarted and rec[2] in seen.started:
            v.append(f"{rec[2]}: its start was acknowledged, though its write failed")
        elif rec[0] == R.SignalReceived and wids.get(rec[1]) in seen.signaled:
            v.append(f"{wids[rec[1]]}: its signal was acknowledged, though its write failed")
        elif rec[0] == R.RunCompleted and wids.get(rec[1]) in seen.results:
            v.append(f"{wids[rec[1]]}: its result was read, though its write failed")
    # What the child acknowledged was in the journal the crash left.
    crash = evidence.after_crash
    crash_wids = _wids(crash)
    for wid in sorted(seen.started - set(crash_wids.values())):
        v.append(f"{wid}: its start was acknowledged, the journal after the crash lacks it")
    crash_signaled = {crash_wids.get(r[1]) for r in crash if r[0] == R.SignalReceived}
    for wid in sorted(seen.signaled - crash_signaled):
        v.append(f"{wid}: its signal was acknowledged, the journal after the crash lacks it")
    crash_results = {crash_wids.get(r[1]): r[2] for r in crash if r[0] == R.RunCompleted}
    for wid, value in sorted(seen.results.items()):
        if crash_results.get(wid) != value:
            v.append(f"{wid}: its result was read, the journal after the crash lacks it")
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
        key = f"{wids.get(run_id, '?')}/{run_id}/{seq}"
        runs = by_key.get(key, [])
        nonces = [line["nonce"] for line in runs]
        if value["nonce"] not in nonces:
            v.append(f"{key} ({name}): the recorded execution is not in the ledger")
        elif nonces[-1] != value["nonce"]:
            after = len(nonces) - 1 - nonces.index(value["nonce"])
            v.append(f"{key} ({name}): ran {after} more time(s) after its result was recorded")


def _top(key: str) -> int:
    """The run-level operation number in a step's key (`<id>/<run>/<seq>`, a leg of
    a fan-out `<n>.<leg>`)."""
    top = re.match(r"\d+", key.rsplit("/", 1)[-1])
    return int(top.group()) if top else 0  # a malformed key is reported on its own


def workdir_for(base: Path, seed: int) -> Path:
    path = base / f"trial-{seed}"
    path.mkdir(parents=True, exist_ok=True)
    return path
