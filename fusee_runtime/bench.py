"""`fusee bench`: this disk's `fdatasync`, and fusee's step rates on it, side by side.

Every measurement runs in a fresh directory beside the home (on the same
disk), removed afterwards. Times are wall-clock on this machine; ratios to
`fdatasync_us` are what compares across machines. `quick` runs each
measurement small, for a smoke test, and its numbers mean little.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from fusee_runtime.codecs import KEYS_ENV
from fusee_runtime.context import Ctx
from fusee_runtime.dsl import step, workflow
from fusee_runtime.engine.engine import Config, Engine
from fusee_runtime.journal.storage import Storage
from fusee_runtime.store.shared import Probe

KEYS = (
    "fdatasync_us",
    "seq_step_us",
    "conc_steps_per_s",
    "start_to_result_us",
    "fanout_syncs",
    "child_fanout",
    "cpu_step_us",
    "recover_s",
    "cli_start_ms",
    "cli_read_ms",
    "codec",
)
"""What a run of the bench reports, in order."""
Where = tuple[Path, str | None]
"""Where one measurement runs: its home, and its PostgreSQL URL (None: the local journal)."""


class Place(Protocol):
    """Where each measurement runs (`_Local`, `bench_pg.Places`), and what the journal's
    commit costs there (`probe`)."""

    def __call__(self, name: str) -> Where: ...
    def probe(self, count: int) -> Probe: ...


@step(name="fusee.bench.nothing")
async def nothing(i: int) -> int:
    return i


@workflow(name="fusee.bench.seq")
async def seq(ctx: Ctx, n: int) -> int:
    for i in range(n):
        await nothing(i)
    return n


@workflow(name="fusee.bench.one")
async def one(ctx: Ctx, _: object) -> int:
    return await nothing(1)


@workflow(name="fusee.bench.tagged")
async def tagged(ctx: Ctx, n: int) -> int:
    """One step, and search attributes that `fusee bench --storage` lists by: one
    customer in 1,000 and an amount spread over 0 to 9,999."""
    ctx.set_attributes({"customer": f"c-{n % 1000}", "cents": n * 7919 % 10_000})
    return await nothing(1)


@workflow(name="fusee.bench.fanout")
async def fanout(ctx: Ctx, n: int) -> int:
    return len(await ctx.all([nothing(i) for i in range(n)]))


@workflow(name="fusee.bench.child")
async def child(ctx: Ctx, i: int) -> int:
    return await nothing(i)


@workflow(name="fusee.bench.parent")
async def parent(ctx: Ctx, n: int) -> int:
    kids = await ctx.all([ctx.start_child(child, f"{ctx.workflow_id}-{i}", i) for i in range(n)])
    return sum(await ctx.all([k.result() for k in kids]))


@workflow(name="fusee.bench.parked")
async def parked(ctx: Ctx, _: object) -> object:
    await nothing(0)
    return await ctx.wait_for("go")


def run(
    home: Path, quick: bool = False, store: str | None = None, encrypt: bool = False
) -> dict[str, object]:
    """Runs every measurement on the disk of `home`, or with the journal in the
    PostgreSQL database `store` (a schema of its own for each measurement, dropped
    afterwards); returns them by `KEYS`, and `codec`: what payloads were stored with.
    `encrypt`: with a key made for the run (`FUSEE_KEYS`, for the commands it runs
    too), every payload is encrypted (`fusee_runtime.codecs.Encrypt`)."""
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=home))
    before = os.environ.get(KEYS_ENV)
    if encrypt:
        os.environ[KEYS_ENV] = "bench=" + base64.b64encode(os.urandom(32)).decode()
    try:
        return _run(scratch, quick, store)
    finally:
        if before is None:
            os.environ.pop(KEYS_ENV, None)
        else:
            os.environ[KEYS_ENV] = before
        shutil.rmtree(scratch, ignore_errors=True)


def _run(scratch: Path, quick: bool, store: str | None) -> dict[str, object]:
    if store is None:
        return asyncio.run(_measure(_Local(scratch), quick))
    from fusee_runtime import bench_pg
    from fusee_runtime.store.shared import open_scratch

    with open_scratch(store) as schemas:
        report = asyncio.run(_measure(bench_pg.Places(scratch, schemas), quick))
        # The concurrent runs again, spread over 1, 2 and 4 worker processes.
        report["workers_steps_per_s"] = {
            str(p): bench_pg.workers_steps_per_s(
                schemas, scratch, p, 100 * (1 if quick else 10), 10
            )
            for p in (1, 2, 4)
        }
        return report


class _Local:
    """Where each measurement runs: a fresh home in the scratch directory."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch

    def __call__(self, name: str) -> tuple[Path, str | None]:
        return self.scratch / name, None

    def probe(self, count: int) -> _Probe:
        return _Probe(self.scratch / "fdatasync.probe", count)


async def _measure(place: Place, quick: bool) -> dict[str, object]:
    n = 1 if quick else 10
    # The disk's latency drifts on a shared machine: it is sampled between the
    # measurements too, and the ratios are to the median of every sample. (With
    # PostgreSQL, the probe is an INSERT of 100 bytes and its COMMIT.)
    probe = place.probe(5 * n)
    out: dict[str, object] = {}
    per_step = await _seq(place("seq"), 100 * n, "fdatasync")
    probe.sample()
    out["conc_steps_per_s"] = await _concurrent(place("conc"), 100 * n, 10)
    probe.sample()
    latencies = await _start_to_result(place("str"), 50 * n)
    probe.sample()
    out["fanout_syncs"] = await _fanout(place("fan"), 100)
    out["child_fanout"] = await _child_fanout(place("kids"), 100 * n)
    out["cpu_step_us"] = round(await _seq(place("cpu"), 100 * n, "none"), 1)
    out["recover_s"] = await _recover(place("rec"), 100 * n)
    out["fdatasync_us"] = base = probe.close()
    out["seq_step_us"] = {"per_step": per_step, "ratio": round(per_step / base["median"], 2)}
    out["start_to_result_us"] = {
        **latencies,
        "ratio": round(latencies["median"] / base["median"], 2),
    }
    out["cli_start_ms"], out["cli_read_ms"] = _cli(place("cli"), 1 if quick else 5)
    codec = Config().codec
    out["codec"] = repr(codec) if codec else "none"
    return {key: out[key] for key in KEYS}


class _Probe:
    """The disk's own latency: a 100-byte write into a preallocated file, then
    `fdatasync`, as the journal appends (its segments are preallocated too)."""

    SIZE = 8 << 20

    def __init__(self, path: Path, count: int) -> None:
        self._storage = Storage()
        self._fd = self._storage.create(path, self.SIZE, b"")
        self._offset = 0
        self._count = count
        self._times: list[float] = []
        self.sample()

    def sample(self) -> None:
        for _ in range(self._count):
            if self._offset + 100 > self.SIZE:
                self._offset = 0
            t = time.perf_counter()
            self._storage.write(self._fd, self._offset, b"x" * 100)
            self._storage.sync(self._fd)
            self._times.append((time.perf_counter() - t) * 1e6)
            self._offset += 104

    def close(self) -> dict[str, float]:
        """The median and p99 of every sample, in microseconds."""
        self.sample()
        self._storage.close(self._fd)
        return _spread(self._times)


async def _seq(where: Where, steps: int, durability: str) -> float:
    """Microseconds per step of one workflow of `steps` steps in sequence."""
    async with _engine(where, durability=durability) as engine:
        t = time.perf_counter()
        await (await engine.start("fusee.bench.seq", steps)).result()
        return round((time.perf_counter() - t) / steps * 1e6, 1)


async def _concurrent(where: Where, runs: int, steps: int) -> dict[str, float]:
    async with _engine(where) as engine:
        before = engine.counters()
        t = time.perf_counter()
        handles = await asyncio.gather(
            *(engine.start("fusee.bench.seq", steps) for _ in range(runs))
        )
        await asyncio.gather(*(h.result() for h in handles))
        seconds = time.perf_counter() - t
        after = engine.counters()
    syncs = after["syncs"] - before["syncs"]
    records = after["records"] - before["records"]
    return {
        "steps_per_s": round(runs * steps / seconds),
        "records_per_fdatasync": round(records / syncs, 1) if syncs else 0.0,
    }


async def _start_to_result(where: Where, count: int) -> dict[str, float]:
    async with _engine(where) as engine:
        times = []
        for _ in range(count):
            t = time.perf_counter()
            await (await engine.start("fusee.bench.one", None)).result()
            times.append((time.perf_counter() - t) * 1e6)
    return _spread(times)


async def _fanout(where: Where, legs: int) -> int:
    """How many `fdatasync`s the legs of one `ctx.all` of `legs` steps needed."""
    async with _engine(where) as engine:
        h = await engine.start("fusee.bench.fanout", legs)
        await engine.wait_until(
            lambda: engine.durability.durable_lsn >= engine.runs.latest(h.id).start_lsn
        )
        before = engine.counters()["syncs"]
        await h.result()
        return int(engine.counters()["syncs"] - before)


async def _child_fanout(where: Where, children: int) -> dict[str, float]:
    """A parent that starts `children` children at once (`ctx.start_child` in `ctx.all`),
    each one step, and gathers their results: the time from its start to its result,
    and the `fdatasync`s it took (each child is a start, a step and a close)."""
    async with _engine(where) as engine:
        before = engine.counters()["syncs"]
        t = time.perf_counter()
        await (await engine.start("fusee.bench.parent", children)).result()
        took = time.perf_counter() - t
        syncs = int(engine.counters()["syncs"] - before)
        return {"children": children, "s": round(took, 3), "syncs": syncs}


async def _recover(where: Where, runs: int) -> float:
    """Seconds from opening a home with `runs` runs interrupted mid-workflow until every
    one of them runs again (its code replayed to where it waits)."""
    async with _engine(where) as engine:
        handles = [await engine.start("fusee.bench.parked", None) for _ in range(runs)]
        await engine.wait_until(lambda: all(engine.runs.latest(h.id).live.parked for h in handles))
    t = time.perf_counter()
    async with _engine(where, warm=False) as engine:
        await engine.wait_until(
            lambda: all(r.live.parked for r in engine.runs.newest.values() if r.is_open)
        )
        return round(time.perf_counter() - t, 3)


def _cli(where: Where, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """Whole processes, the best of `repeat` tries of each, in milliseconds.

    `cli_start_ms`: `fusee --help`, a `fusee start` of a one-step workflow, and
    `python -c "import typer"` for scale. `cli_read_ms`: then, on the home those
    starts wrote (`repeat` + 1 completed runs, no process owning it, so each
    command opens it passively: lock, recovery, history store), `fusee list` (the
    table, into a pipe) and `fusee describe ID`; `ratio_to_help` is the slower
    of the two over `fusee --help`.

    fusee's modules are compiled first, as pip does when it installs the
    package: an editable install under PYTHONDONTWRITEBYTECODE would
    otherwise compile them again in every command, which is not what users
    of an installed fusee pay.
    """
    import compileall

    for package in (Path(__file__).parent, Path(__file__).parent.parent / "fusee_cli"):
        compileall.compile_dir(package, quiet=2)
    fusee = shutil.which("fusee") or str(Path(sys.executable).with_name("fusee"))
    home, store = where
    where_args = ["--home", str(home), "--app", __name__]
    if store is not None:
        where_args = ["--store", store, *where_args]
    commands = {
        "import_typer": [sys.executable, "-c", "import typer"],
        "help": [fusee, "--help"],
        "start": [fusee, *where_args[:2], "start", "fusee.bench.one", *where_args[2:]],
    }
    start = {name: _best(command, repeat) for name, command in commands.items()}
    start["help_ratio"] = round(start["help"] / start["import_typer"], 2)
    subprocess.run([*commands["start"], "--id", "bench-read"], capture_output=True, check=True)
    read = {
        "list": _best([fusee, *where_args[:2], "list", *where_args[2:]], repeat),
        "describe": _best(
            [fusee, *where_args[:2], "describe", "bench-read", *where_args[2:]], repeat
        ),
    }
    read["ratio_to_help"] = round(max(read.values()) / start["help"], 2)
    return start, read


def _best(command: list[str], repeat: int) -> float:
    """The fastest of `repeat` runs of `command` (which must succeed), in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t)
    return round(best * 1000, 1)


class _Warm:
    """An engine whose journal's first segment exists (made by a first run), so its
    creation (writing the whole preallocated segment) is not in what is timed."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def __aenter__(self) -> Engine:
        engine = await self.engine.__aenter__()
        await (await engine.start("fusee.bench.one", None)).result()
        return engine

    async def __aexit__(self, *exc: object) -> None:
        await self.engine.__aexit__(*exc)


def _engine(where: Where, durability: str = "fdatasync", warm: bool = True) -> _Warm | Engine:
    import logging

    # durability="none" says loudly that it is unsafe; here that is the point.
    logging.getLogger("fusee").disabled = durability == "none"
    try:
        config = Config(durability=durability, segment_bytes=64 << 20, store=where[1])  # type: ignore[arg-type]
    finally:
        logging.getLogger("fusee").disabled = False
    engine = Engine(where[0], app=None, config=config)
    return _Warm(engine) if warm else engine


def _spread(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"median": round(statistics.median(ordered), 1), "p99": round(p99, 1)}
