"""Writes the golden journals: `python tests/golden/make_golden.py`.

With the code of the checkout it plays `golden_app.play` from nothing, once on
the local journal and once on PostgreSQL, then opens each home once more,
passively, with checkpoints on, so that its closed runs move to the history
store and a checkpoint is written at the journal's end (compaction needs two:
the journal stays whole). It writes beside this file:

- `home/`: the local home's journal segment, its checkpoint and the history
  store, `history.db` (the lock, the completion secret, the run log and the
  control socket are not part of it: whoever opens a copy makes them);
- `postgres.sql`: `pg_dump` of fusee's tables in the PostgreSQL database the same
  play wrote (schema and data: it restores into an empty database with `psql -f`);
- `expected.json`: what the code says of every run, read back from the local
  home: its `describe` (`run_json`), its result, the history of its workflow id
  as `fusee history --json` gives it, the schedule's and the limit's state; the
  record kinds the journal holds, with their codes, and how many records.

Randomness is seeded (`seeded`): run ids, update ids, `ctx.uuid` and `ctx.random`
come out the same on each play, so both stores hold the same records, and the
test plays again (`--out DIR --again`) and compares the bytes.

Run it once, for a new fixture; never to make a failing test pass (README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(ROOT), str(HERE.parent), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

import golden_app  # noqa: E402
import orjson  # noqa: E402

from fusee_runtime import Engine, FakeClock  # noqa: E402
from fusee_runtime.control.api import Control, run_json  # noqa: E402
from fusee_runtime.journal import records  # noqa: E402
from fusee_runtime.journal.reader import recover  # noqa: E402
from fusee_runtime.journal.records import R  # noqa: E402
from fusee_runtime.journal.storage import Storage  # noqa: E402

SEED = 37
"""The seed of the play's randomness (issue 37 asked for the fixture)."""
CHECKPOINT_BYTES = 4 << 20
"""Checkpoints on (the default size), for the passive open that writes one."""
KEPT = ("journal/*.seg", "journal/*.ckpt", "history.db")
"""The files of a home the fixture keeps."""
VARIANTS = ("as kept", "journal only")
"""How a copy of the golden home is opened: with its checkpoint and history store, or
from its journal's segments alone (every closed run moved to the store again)."""
TABLES = (
    "fusee_schema",
    "fusee_journal",
    "fusee_checkpoints",
    "fusee_owner",
    "fusee_runs",
    "fusee_pruned",
    "fusee_secret",
    "fusee_layout",
    "fusee_logs",
)
"""fusee's tables (`store/pg_schema.py`) but the control API's requests and answers
(empty once the engine closed, and not the journal's)."""
DERIVED_TABLES = ("fusee_checkpoints", "fusee_runs", "fusee_pruned")
"""What a PostgreSQL store holds beside its journal: emptied, it opens "journal only"."""


def seeded(seed: int = SEED) -> None:
    """Makes `uuid.uuid4` and `random` give the same sequences on every play.

    The engine draws run ids and update ids from `uuid.uuid4()`, `ctx.uuid` and
    `ctx.random` from both; seeded, the play writes the same bytes each time.
    """
    rng = random.Random(seed)

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    uuid.uuid4 = uuid4  # (in the process of the script only)
    random.seed(seed)


async def write_home(home: Path, store: str | None = None) -> float:
    """Plays the golden play in `home` (and `store`), then opens it once more with
    checkpoints on; returns where the clock ended."""
    seeded()
    clock = FakeClock(golden_app.T0)

    def open_engine(**changes: Any) -> Engine:
        return Engine(home, app=golden_app, config=golden_app.config(clock, store, **changes))

    await golden_app.play(open_engine, clock)
    passive = golden_app.config(clock, store, drive=False, checkpoint_bytes=CHECKPOINT_BYTES)
    async with Engine(home, app=golden_app, config=passive):
        pass  # a clean close: the history store takes the closed runs, then a checkpoint
    return clock.now()


def copy_home(home: Path, into: Path, variant: str = "as kept") -> None:
    """Copies the files of `home` the fixture keeps (`KEPT`; the segments only for
    "journal only") into `into`, created anew."""
    if into.exists():
        shutil.rmtree(into)
    (into / "journal").mkdir(parents=True)
    patterns = KEPT if variant == "as kept" else KEPT[:1]
    for pattern in patterns:
        for f in sorted(home.glob(pattern)):
            shutil.copyfile(f, into / f.relative_to(home))
            (into / f.relative_to(home)).chmod(0o600)
    for directory in (into, into / "journal"):
        directory.chmod(0o700)  # as its owner keeps a home
    leftovers = sorted(p.name for p in home.glob("history.db-*"))
    if leftovers:
        raise RuntimeError(f"the history store was not closed whole: {leftovers}")


def payloads(journal: Path) -> list[bytes]:
    """Every record payload of a local journal, in lsn order."""
    return [payload for _, payload in recover(journal, Storage()).records]


def kinds_of(payloads: list[bytes]) -> dict[str, int]:
    """The record kinds among `payloads`, by name, with their codes."""
    codes = {records.decode(p)[0] for p in payloads}
    return {R(code).name: code for code in sorted(codes)}


async def expected(home: Path, clock_at: float, store: str | None = None) -> dict[str, Any]:
    """What the code says of every run of a golden home, opened without driving it."""
    config = golden_app.config(FakeClock(clock_at), store, drive=False)
    async with Engine(home, app=golden_app, config=config) as engine:
        control = Control(engine)
        infos = list(reversed(await engine.list(limit=1000)))
        runs = []
        for listed in infos:
            # (`describe`, not the row `list` gives: when this fixture was made, `list`
            # left `failure` out for a run the history store held.)
            info = await engine.handle(listed.id, listed.run_id).describe()
            doc = run_json(info)
            if info.status == "completed":
                doc["result"] = await engine.handle(info.id, info.run_id).result()
            runs.append(doc)
        ids = list(dict.fromkeys(info.id for info in infos))
        histories = {id: await control.history(id) for id in ids}
        schedules = [s for s in await control.schedules() if s["workflow"].startswith("golden.")]
        limits = await control.limits()
    return {
        "clock": clock_at,
        "runs": runs,
        "histories": histories,
        "schedules": schedules,
        "limits": limits,
    }


async def expected_of_both(home: Path, clock_at: float) -> dict[str, Any]:
    """`expected` of a copy of `home` opened each way (`VARIANTS`), which must agree."""
    said = []
    for variant in VARIANTS:
        with tempfile.TemporaryDirectory() as tmp:
            copy_home(home, Path(tmp) / "home", variant)
            said.append(await expected(Path(tmp) / "home", clock_at))
    if said[0] != said[1]:
        raise RuntimeError("the golden home opens to other runs from its journal alone")
    return said[0]


def pg_tool(bindir: Path, name: str) -> str:
    """A PostgreSQL program of the server's version: beside its `pg_ctl` (which may be a
    link out of the version's directory), else on the PATH."""
    for where in (bindir, (bindir / "pg_ctl").resolve().parent):
        if (where / name).exists():
            return str(where / name)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed beside {bindir}/pg_ctl nor on the PATH")
    return found


def dump_postgres(bindir: Path, url: str, out: Path) -> None:
    """`pg_dump` of fusee's tables in `url`, schema and data, into `out`."""
    args = [pg_tool(bindir, "pg_dump"), "--no-owner", "--no-privileges", "--inserts"]
    for table in TABLES:
        args += ["--table", table]
    done = subprocess.run([*args, url], capture_output=True, text=True, check=True)
    # Left out: the lines naming pg_dump's and the server's versions, and psql's
    # `\restrict KEY` / `\unrestrict KEY` (psql commands with a random key per dump,
    # which pg_dump writes since its releases of August 2025, 15.14 and 17.6 among them,
    # and an older psql refuses). The file restores with any psql.
    skipped = ("-- Dumped ", "\\restrict ", "\\unrestrict ")
    lines = [line for line in done.stdout.splitlines() if not line.startswith(skipped)]
    out.write_text("\n".join(lines) + "\n")


async def write_postgres(out: Path) -> list[bytes]:
    """Plays the play on a temporary PostgreSQL server and dumps its database; returns
    the journal's payloads."""
    import postgres_server

    bindir = postgres_server.binaries()
    if bindir is None:
        raise SystemExit("PostgreSQL's initdb and pg_ctl are not installed")
    server = postgres_server.Server(bindir)
    server.start()
    try:
        url = server.database()
        with tempfile.TemporaryDirectory() as tmp:
            await write_home(Path(tmp) / "home", url)
        dump_postgres(bindir, url, out)
        return postgres_server.journal_payloads(url)
    finally:
        server.stop()


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


async def main(out: Path, again: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        played = Path(tmp) / "home"
        clock_at = await write_home(played)
        copy_home(played, out / "home")
    journal = payloads(out / "home" / "journal")
    kinds = kinds_of(journal)
    missing = sorted({r.name for r in R} - kinds.keys())
    if missing and not again:
        raise SystemExit(f"the play left out record kinds: {missing}")
    said = await expected_of_both(out / "home", clock_at)
    made_at = None if again else commit()  # (a play again compares all but this)
    said = {"commit": made_at, "kinds": kinds, "records": len(journal), **said}
    (out / "expected.json").write_bytes(
        orjson.dumps(said, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )
    if again:
        return
    if await write_postgres(out / "postgres.sql") != journal:
        raise SystemExit("the play wrote other records on PostgreSQL than on the local journal")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: here)")
    parser.add_argument(
        "--again",
        action="store_true",
        help="play again for the test: the local home and expected.json only, whatever "
        "record kinds the code has now",
    )
    args = parser.parse_args()
    asyncio.run(main(args.out.resolve(), args.again))
