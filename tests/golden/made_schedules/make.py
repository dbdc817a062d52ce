"""Writes the golden journal of schedules made at run time (issue 38):
`python tests/golden/made_schedules/make.py`.

A second fixture beside the first (`tests/golden/README.md`), for the record kinds
that came after it: `ScheduleSet` and `ScheduleDeleted`. With the code of the
checkout, on a `FakeClock`, it makes schedule "ticks" (every 5 minutes, with an
input), lets it fire once, changes it to every 10 minutes, lets it fire again,
pauses and unpauses it, deletes it; then writes `home/journal/` and
`expected.json` (the schedules' listing before the delete, the runs, the record
kinds with their codes, how many records). The test plays it again (`--again`)
and compares the bytes. Run it once; never to make a failing test pass.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import Config, Ctx, Engine, FakeClock, workflow
from fusee_runtime.control.wire import run_json
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage

HERE = Path(__file__).resolve().parent

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@workflow(name="gms.tick")
async def gms_tick(ctx: Ctx, given: Any) -> Any:
    return given


def seeded(seed: int = 38) -> None:
    """Run ids from a seeded generator: each play writes the same bytes."""
    rng = random.Random(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # this process only


def payloads(journal: Path) -> list[bytes]:
    """Every record payload of a local journal, in lsn order."""
    return [payload for _, payload in recover(journal, Storage()).records]


def kinds_of(records: list[bytes]) -> dict[str, int]:
    codes = {decode(p)[0] for p in records}
    return {R(code).name: code for code in sorted(codes)}


async def play(home: Path) -> dict[str, Any]:
    seeded()
    clock = FakeClock(T0)
    config = Config(
        clock=clock,
        checkpoint_bytes=None,
        schedules=True,
        segment_bytes=64 << 10,  # a small segment file to commit
        payload_bytes_max=16 << 10,
    )
    async with Engine(home, app=None, config=config) as engine:
        schedules = engine.schedules
        await schedules.set(
            "ticks", {"workflow": "gms.tick", "cron": "*/5 * * * *", "input": {"n": 1}}, create=True
        )
        await clock.wait_for_sleepers()
        clock.set(T0 + 100)  # 22:15: its first instant
        await engine.wait_until(lambda: len(engine.runs.by_run_id) == 1)
        await schedules.set("ticks", {"cron": "*/10 * * * *"}, create=False)
        await clock.wait_for_sleepers()
        clock.set(T0 + 400)  # 22:20
        await engine.wait_until(lambda: len(engine.runs.by_run_id) == 2)
        await schedules.act("ticks", "pause")
        await schedules.act("ticks", "unpause")
        listed = schedules.list()
        await schedules.delete("ticks")
        for run in list(engine.runs.by_run_id.values()):
            await engine.handle(run.workflow_id).result()
        runs = [run_json(info) for info in await engine.list()]
    return {"schedules": listed, "runs": runs}


async def main(out: Path, again: bool) -> None:
    home = out / "home"
    if home.exists():
        shutil.rmtree(home)
    said = await play(home)
    for extra in sorted(home.iterdir()):  # the journal alone is the fixture
        if extra.name != "journal":
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    records = payloads(home / "journal")
    said |= {"kinds": kinds_of(records), "records": len(records)}
    said["commit"] = None if again else _commit()
    (out / "expected.json").write_bytes(orjson.dumps(said, option=orjson.OPT_INDENT_2))


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return done.stdout.strip()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--again", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.out, args.again))
