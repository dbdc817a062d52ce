"""`fusee bench --storage`: opening a home, and its disk, track the open work, not the past.

In a scratch directory beside the home (removed afterwards), with the
default `Config` (its segment size, checkpoint interval and `fdatasync`):

- home A: `open_runs` runs that each do one step and then park on a signal,
  then `runs` one-step workflows run to completion, `WAVE` at a time (each
  sets two search attributes first, for `list(where=)`); the
  process that built it closes it cleanly;
- home B: the same open runs only, closed cleanly the same way;
- a crash image of each: a copy taken while its builder sat idle after the
  build (every record durable, the history store caught up, no checkpoint
  being written), just before that clean close. It is what a SIGKILL at
  that moment leaves: no clean-close checkpoint, the journal since the last
  periodic checkpoint to replay, its closed runs to move to the store again.

Each home is then opened `rounds` times, alternating A and B, each time in
a fresh process so imports and caches are equal. `open_s` is until
`Engine.open()` returns (checkpoint read, journal after it scanned, memory
rebuilt, history store open); `resumed_s` until every open run has run its
code again to where it parks. A process that opened a crash image SIGKILLs
itself once measured, so the image stays one. Times are wall-clock on this
machine; the ratios of A to B are the measure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, cast

import orjson

from fusee_runtime import search
from fusee_runtime.bench import parked, tagged
from fusee_runtime.engine.engine import Config, Engine
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.json import JsonObject
from fusee_runtime.store.history_db import NAME as HISTORY_DB

KEYS = ("config", "build", "disk", "open", "crash_open", "list")
"""What a run of the storage bench reports, in order."""

RUNS = 200_000
OPEN_RUNS = 1000
WAVE = 1000
"""Runs started together, then awaited together, while building a home."""
ROUNDS = 5
"""Opens of each home, alternating."""
TARGET_RATIO = 2.0
"""Opening A takes at most this many times as long as opening B."""
JOURNAL_SLACK_BYTES = 64 << 20
"""A's journal directory is smaller than this plus the open runs' records."""
LIST_LIMIT = 100
LIST_TRIES = 5

_MODULE = "fusee_runtime.bench_storage"


def run(
    home: Path,
    runs: int = RUNS,
    quick: bool = False,
    say: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Builds the homes on the disk of `home`, measures them, returns them by `KEYS`.

    `quick` keeps 100 open runs and opens each home once (a smoke test);
    `say` is told what is being done (the build takes minutes).
    """
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=home))
    open_runs, rounds = (100, 1) if quick else (OPEN_RUNS, ROUNDS)
    try:
        return _measure(scratch, runs, open_runs, rounds, say or (lambda _: None))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _measure(
    scratch: Path, runs: int, open_runs: int, rounds: int, say: Callable[[str], None]
) -> dict[str, object]:
    config = Config()
    a, b = scratch / "a", scratch / "b"
    a_crash, b_crash = scratch / "a-crash", scratch / "b-crash"
    out: dict[str, object] = {
        "config": {
            "runs": runs,
            "open_runs": open_runs,
            "wave": WAVE,
            "rounds": rounds,
            "segment_bytes": config.segment_bytes,
            "checkpoint_bytes": config.checkpoint_bytes,
            "durability": config.durability,
        }
    }
    say(f"building home A: {open_runs:,} open runs, then {runs:,} runs to completion")
    built_a = _build(a, open_runs, runs, a_crash)
    say(f"building home B: {open_runs:,} open runs")
    built_b = _build(b, open_runs, 0, b_crash)
    out["build"] = {"a": built_a, "b": built_b}
    out["disk"] = {**_disk(a), "journal_bytes_at_crash": _journal_bytes(a_crash)}
    say(f"opening each crash image {rounds} times, then each home {rounds} times")
    out["crash_open"] = _opens(a_crash, b_crash, rounds, crash=True)
    out["open"] = _opens(a, b, rounds, crash=False)
    say("listing home A's completed runs")
    out["list"] = {**asyncio.run(_list(a)), **_cli_list(a)}
    return {key: out[key] for key in KEYS}


# -- the parent: build, look at the disk, open, list --------------------------------------


def _build(home: Path, open_runs: int, runs: int, image: Path) -> JsonObject:
    """Builds `home` in a child process; copies its crash image to `image` while the
    child is idle, then has it close cleanly. Returns what the child measured."""
    child = _spawn("build", str(home), str(open_runs), str(runs), str(WAVE))
    try:
        built = _reply(child)
        _copy_home(home, image)
        assert child.stdin is not None
        child.stdin.write("close\n")
        child.stdin.flush()
        built.update(_reply(child))
        if child.wait() != 0:
            raise RuntimeError(f"the bench's build process exited with {child.returncode}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return built


class _Spread(TypedDict):
    median: float
    all: list[float]


class _Opened(TypedDict):
    """What an open process replies (`_open_child`)."""

    open_s: float
    resumed_s: float
    runs_open: int
    records_after_checkpoint: int


class _Opens(TypedDict):
    open_s: _Spread
    resumed_s: _Spread
    runs_open: int
    records_after_checkpoint: int


def _opens(a: Path, b: Path, rounds: int, crash: bool) -> dict[str, object]:
    """Opens A and B alternately, each in a fresh process; their medians and ratios.

    The target is for homes closed cleanly. A crash image replays the journal since
    its last checkpoint (up to `Config.checkpoint_bytes` of it, however long the
    home's past), so it has none.
    """
    times: dict[str, list[_Opened]] = {"a": [], "b": []}
    for _ in range(rounds):
        for name, home in (("a", a), ("b", b)):
            times[name].append(_open_once(home, crash))
    each: dict[str, _Opens] = {}
    for name, got in times.items():
        each[name] = {
            "open_s": _spread([t["open_s"] for t in got]),
            "resumed_s": _spread([t["resumed_s"] for t in got]),
            "runs_open": got[-1]["runs_open"],
            "records_after_checkpoint": got[-1]["records_after_checkpoint"],
        }
    out: dict[str, object] = dict(each)
    a_s, b_s = each["a"], each["b"]
    out["ratio_open_s"] = round(a_s["open_s"]["median"] / b_s["open_s"]["median"], 2)
    out["ratio_resumed_s"] = round(a_s["resumed_s"]["median"] / b_s["resumed_s"]["median"], 2)
    out["target_ratio"] = None if crash else TARGET_RATIO
    return out


def _open_once(home: Path, crash: bool) -> _Opened:
    child = _spawn("open", str(home), "crash" if crash else "clean")
    try:
        got = _reply(child)
        code = child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if code != (-signal.SIGKILL if crash else 0):
        raise RuntimeError(f"the bench's open process exited with {code}")
    return cast(_Opened, got)  # (what `_open_child` replies)


def _disk(home: Path) -> dict[str, object]:
    """A's journal directory against `JOURNAL_SLACK_BYTES` plus its open runs' records
    (the frames their records take, as the newest checkpoint holds them)."""
    journal = home / "journal"
    checkpoints = ckpt.listed(journal)
    if not checkpoints:
        raise RuntimeError(f"{journal} holds no checkpoint after a clean close")
    newest = ckpt.read(checkpoints[0][1], Storage())
    open_records_bytes = 0
    open_runs = 0
    for _, recs in newest.body["runs"]:
        open_runs += 1
        open_records_bytes += sum(fmt.frame_size(len(orjson.dumps(rec))) for _, rec in recs)
    journal_bytes = _journal_bytes(home)
    limit = JOURNAL_SLACK_BYTES + open_records_bytes
    history = sum(p.stat().st_size for p in home.glob(HISTORY_DB + "*"))
    return {
        "journal_bytes": journal_bytes,
        "segments": len(list(journal.glob("*.seg"))),
        "checkpoints": len(checkpoints),
        "checkpoint_bytes": checkpoints[0][1].stat().st_size,
        "checkpoint_runs": open_runs,
        "open_records_bytes": open_records_bytes,
        "limit_bytes": limit,
        "within_limit": journal_bytes < limit,
        "history_db_bytes": history,
    }


def _journal_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in (home / "journal").iterdir() if p.is_file())


WHERE: dict[str, dict[str, object]] = {
    "customer": {"customer": "c-7"},
    "customer_and_cents": {"customer": "c-7", "cents": (">", 5000)},
    "cents_range": {"cents": [(">=", 9900), ("<", 9950)]},
}
"""The `list(where=)` of the bench: one customer in 1,000 (200 runs of 200,000), that
customer over an amount, and a range on amounts that holds 1,000 runs."""


async def _list(home: Path) -> dict[str, object]:
    """`list --status completed` on A, from this process (opened passively, as `fusee
    list` opens a home with no owner), and the history store's plan for it; then each
    `list(where=)` of `WHERE`."""
    engine = Engine(home, app=None, config=Config(drive=False))
    await engine.open()
    try:
        tries = []
        for _ in range(LIST_TRIES):
            t = time.perf_counter()
            got = await engine.list(status="completed", limit=LIST_LIMIT)
            tries.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        every = await engine.list(status="completed")
        every_ms = (time.perf_counter() - t) * 1000
        assert engine.runs.store is not None
        plan = engine.runs.store.query_plan("completed", None, LIST_LIMIT)
        where = {name: await _where(engine, w) for name, w in WHERE.items()}
    finally:
        await engine.close()
    return {
        "limit": LIST_LIMIT,
        "limit_ms": _spread(tries),
        "limit_rows": len(got),
        "all_ms": round(every_ms, 1),
        "all_rows": len(every),
        "plan": plan,
        "uses_index": "USING INDEX runs_by_status" in plan and "TEMP B-TREE" not in plan,
        "where": where,
    }


async def _where(engine: Engine, where: dict[str, object]) -> dict[str, object]:
    tries = []
    for _ in range(LIST_TRIES):
        t = time.perf_counter()
        got = await engine.list(where=where, limit=LIST_LIMIT)
        tries.append((time.perf_counter() - t) * 1000)
    assert engine.runs.store is not None
    plan = engine.runs.store.query_plan(None, None, LIST_LIMIT, search.conditions(where))
    return {
        "where": {k: list(v) if isinstance(v, tuple) else v for k, v in where.items()},
        "limit_ms": _spread(tries),
        "rows": len(got),
        "plan": plan,
        "uses_index": "attributes_by_value" in plan and "SCAN" not in plan,
    }


def _cli_list(home: Path) -> dict[str, object]:
    """One whole `fusee list --status completed --limit 100 --json` process on A."""
    fusee = shutil.which("fusee") or str(Path(sys.executable).with_name("fusee"))
    command = [fusee, "list", "--status", "completed", "--limit", str(LIST_LIMIT), "--json"]
    command += ["--home", str(home), "--app", "fusee_runtime.bench"]
    t = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=True)
    ms = (time.perf_counter() - t) * 1000
    return {"cli_ms": round(ms, 1), "cli_rows": len(orjson.loads(done.stdout))}


def _copy_home(home: Path, image: Path) -> None:
    """Copies a home whose owner is idle, leaving out its control socket."""

    def sockets(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if stat.S_ISSOCK(os.lstat(os.path.join(directory, n)).st_mode)]

    shutil.copytree(home, image, ignore=sockets)


def _spawn(*args: str) -> subprocess.Popen[str]:
    """A child process running `_main(args)`; its stderr is ours."""
    return subprocess.Popen(
        [sys.executable, "-m", _MODULE, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _reply(child: subprocess.Popen[str]) -> JsonObject:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise RuntimeError(f"the bench's child process ended ({child.wait()}) without a reply")
    reply: JsonObject = orjson.loads(line)
    return reply


def _spread(values: list[float]) -> _Spread:
    return {
        "median": round(statistics.median(values), 4),
        "all": [round(v, 4) for v in values],
    }


# -- the children --------------------------------------------------------------------------


async def _build_child(home: Path, open_runs: int, runs: int, wave: int) -> None:
    """Builds the home, says so, waits for a line on stdin, then closes cleanly."""
    engine = Engine(home, app=None)
    await engine.open()
    t = time.perf_counter()
    handles = []
    for first in range(0, open_runs, wave):
        n = min(wave, open_runs - first)
        handles += await asyncio.gather(*(engine.start(parked, None) for _ in range(n)))
    await engine.wait_until(lambda: all(engine.runs.newest[h.id].live.parked for h in handles))
    parked_s = time.perf_counter() - t
    t = time.perf_counter()
    step = max(runs // 10, wave)
    in_memory_max = 0  # runs held in memory: the open ones, and the closed not yet stored
    for first in range(0, runs, wave):
        n = min(wave, runs - first)
        started = await asyncio.gather(*(engine.start(tagged, first + i) for i in range(n)))
        await asyncio.gather(*(h.result() for h in started))
        in_memory_max = max(in_memory_max, int(engine.counters()["runs_in_memory"]))
        if (first + n) % step == 0 and first + n < runs:
            _say(f"  {first + n:,} of {runs:,} runs done ({time.perf_counter() - t:.0f} s)")
    runs_s = time.perf_counter() - t
    # Idle from here: everything closed is in the history store, no checkpoint is
    # being written, so the parent's copy is what a SIGKILL now would leave.
    await engine.checkpoints.flush_history()
    while engine.checkpoints.task is not None:
        await asyncio.gather(engine.checkpoints.task, return_exceptions=True)
    counters = engine.counters()
    _reply_line(
        {
            "open_runs_s": round(parked_s, 3),
            "runs_s": round(runs_s, 3),
            "runs_per_s": round(runs / runs_s) if runs else 0,
            "journal_bytes_written": int(counters["bytes"]),
            "records": int(counters["records"]),
            "fdatasyncs": int(counters["syncs"]),
            "segments_created": int(counters["segments_created"]),
            "runs_in_memory_max": in_memory_max,
        }
    )
    await asyncio.to_thread(sys.stdin.readline)
    t = time.perf_counter()
    await engine.close()
    _reply_line({"close_s": round(time.perf_counter() - t, 3)})


async def _open_child(home: Path, crash: bool) -> None:
    """Opens the home, times it, says so; then closes it, or SIGKILLs itself (`crash`)
    so that the home stays as it was."""
    t = time.perf_counter()
    engine = Engine(home, app=None)
    await engine.open()
    open_s = time.perf_counter() - t
    pending = [r for r in engine.runs.by_run_id.values() if r.is_open]
    count = len(pending)

    def resumed() -> bool:
        while pending and pending[-1].live.parked:
            pending.pop()
        return not pending

    await engine.wait_until(resumed)
    resumed_s = time.perf_counter() - t
    _reply_line(
        {
            "open_s": open_s,
            "resumed_s": resumed_s,
            "runs_open": count,
            "records_after_checkpoint": engine.durability.durable_lsn - engine.checkpoints.lsn,
        }
    )
    if crash:
        os.kill(os.getpid(), signal.SIGKILL)
    await engine.close()


def _reply_line(value: dict[str, object]) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _main(argv: list[str]) -> None:
    what, home = argv[0], Path(argv[1])
    if what == "build":
        open_runs, runs, wave = (int(a) for a in argv[2:5])
        asyncio.run(_build_child(home, open_runs, runs, wave))
    elif what == "open":
        asyncio.run(_open_child(home, argv[2] == "crash"))
    else:
        raise SystemExit(f"unknown bench step {what!r}")


if __name__ == "__main__":
    _main(sys.argv[1:])
