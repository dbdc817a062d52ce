"""Writes the golden journal of rates over time (issue 40): `python tests/golden/rates/make.py`.

A fixture beside the first (`tests/golden/README.md`) for the record kind that came
after it: `RateTaken` and `RateSet`. With the code of the checkout, on a `FakeClock`,
one run takes three steps under `Rate(2, per=10)`: two slots at once, the third once
the clock has moved 10 s; a second run takes a slot of a keyed rate, whose size is
then set at run time. It writes `home/journal/` and
`expected.json` (the runs, the rate windows, the record kinds with their codes, how
many records). The test plays it again (`--again`) and compares the bytes. Run it
once; never to make a failing test pass.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import Config, Ctx, Engine, FakeClock, Rate, step, workflow
from fusee_runtime.control.wire import run_json
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.run import WaitKind

HERE = Path(__file__).resolve().parent

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@step(name="grt.call", rate=Rate(2, per=10))
async def grt_call(i: int) -> int:
    return i


@step(name="grt.keyed", rate=Rate(1, per=60, name="grt.service", key=lambda who: who))
async def grt_keyed(who: str) -> str:
    return who


@workflow(name="grt.calls")
async def grt_calls(ctx: Ctx, n: int) -> list[int]:
    return [await grt_call(i) for i in range(n)]


@workflow(name="grt.tenant")
async def grt_tenant(ctx: Ctx, who: str) -> str:
    return str(await grt_keyed(who))


def seeded(seed: int = 40) -> None:
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
        clock=clock, checkpoint_bytes=None, segment_bytes=64 << 10, payload_bytes_max=16 << 10
    )
    async with Engine(home, app=None, config=config) as engine:
        calls = await engine.start(grt_calls, 3, id="calls-1")

        def waits() -> bool:
            waiting = engine.runs.latest("calls-1").info().waiting
            return any(w.kind == WaitKind.RATE for w in waiting)

        await engine.wait_until(waits)  # two slots taken; the third waits 10 s
        clock.advance(10)
        assert await calls.result() == [0, 1, 2]
        assert await (await engine.start(grt_tenant, "acme", id="tenant-1")).result() == "acme"
        await engine.rate("grt.service", 2, per=30)  # set at run time: RateSet
        runs = [run_json(info) for info in await engine.list()]
        rates = [dataclasses.asdict(info) for info in engine.driver.limits.rates.list()]
    return {"runs": runs, "rates": rates}


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
