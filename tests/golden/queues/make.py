"""Writes the golden journal of queues of runs (issue 40): `python tests/golden/queues/make.py`.

A fixture beside the first (`tests/golden/README.md`) for the record kinds that came
after it: `QueueSet`, `RunAdmitted` and `StartDebounced`. With the code of the
checkout, on a `FakeClock`, queue "gq.sync" is set to one run at a time per key; three
runs start in it under two keys (the second of key "a" waits for the first), one with
a priority; a fourth run waits in a queue set to 0 and is cancelled there; two
debounced starts make one run, with the second's input. It writes `home/journal/` and
`expected.json` (the runs, the queues, the record kinds with their codes, how many
records). The test plays it again (`--again`) and compares the bytes. Run it once;
never to make a failing test pass.
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

from fusee_runtime import Config, Ctx, Engine, FakeClock, step, workflow
from fusee_runtime.control.wire import run_json
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage

HERE = Path(__file__).resolve().parent

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@step(name="gq.work")
async def gq_work(who: str) -> str:
    return who


@workflow(name="gq.job")
async def gq_job(ctx: Ctx, who: str) -> str:
    return str(await gq_work(who))


def seeded(seed: int = 41) -> None:
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
        await engine.queue("gq.sync", concurrency=None, per_key=1)
        a1 = await engine.start(gq_job, "a1", id="a-1", queue="gq.sync", queue_key="a")
        a2 = await engine.start(gq_job, "a2", id="a-2", queue="gq.sync", queue_key="a")
        b1 = await engine.start(gq_job, "b1", id="b-1", queue="gq.sync", queue_key="b", priority=3)
        assert [await a1.result(), await a2.result(), await b1.result()] == ["a1", "a2", "b1"]
        await engine.queue("gq.held", concurrency=0)
        held = await engine.start(gq_job, "held", id="held-1", queue="gq.held")
        await held.cancel()
        burst = [
            await engine.start(gq_job, who, id=f"d-{who}", debounce=5, debounce_key="k")
            for who in ("d1", "d2")
        ]
        clock.advance(5)
        assert [await h.result() for h in burst] == ["d2", "d2"]
        runs = [run_json(info) for info in await engine.list()]
        queues = [dataclasses.asdict(info) for info in engine.queues()]
    return {"runs": runs, "queues": queues}


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
