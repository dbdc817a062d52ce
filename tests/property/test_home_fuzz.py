"""Random damage to a real home's journal, opened by the `Engine` itself.

`test_journal_fuzz` holds `recover` to its contract on raw records; this
holds the engine to it on a home full of real runs (finished ones, runs
waiting for a signal, runs asleep, over several segments): opening the
damaged home either raises `JournalCorrupt` naming a segment file and an
offset, or opens with a prefix of what was there. A run it still knows
keeps its recorded result, nothing it did not know appears, and the
engine closes cleanly. No other exception, no hang.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from test_journal_fuzz import FUZZ, Flip, Garbage, Truncate, damage, write_out

from fusee_runtime import Config, Ctx, Engine, FakeClock, JournalCorrupt, Status, workflow


async def _double(n: int) -> int:
    return 2 * n


@workflow(name="hf_steps")
async def steps(ctx: Ctx, n: int) -> int:
    total = 0
    for i in range(3):
        total += await ctx.step(f"s{i}", _double, n + i)
    return total


@workflow(name="hf_wait")
async def wait(ctx: Ctx, n: int) -> int:
    await ctx.step("before", _double, n)
    got = await ctx.wait_for("go")
    return await ctx.step("after", _double, got)


@workflow(name="hf_nap")
async def nap(ctx: Ctx, n: int) -> int:
    await ctx.sleep("nap", 3600)
    return n


def engine(home: Path) -> Engine:
    # Small segments, so that damage lands in older segments as well as the newest.
    config = Config(clock=FakeClock(), segment_bytes=6 << 10, payload_bytes_max=1024)
    return Engine(home, app=None, config=config)


async def _fill(home: Path) -> dict[str, tuple[Status, Any]]:
    async with engine(home) as e:
        done = [await e.start("hf_steps", i, id=f"steps-{i}") for i in range(40)]
        for h in done:
            await h.result()
        for i in range(3):
            await e.start("hf_wait", i, id=f"wait-{i}")
        await e.signal("wait-0", "go", 21)
        assert await e.handle("wait-0").result() == 42
        # Last, so the newest segment holds starts that damage there can take away.
        for i in range(12):
            await e.start("hf_nap", i, id=f"nap-{i}")
        return await _runs(e)


async def _runs(e: Engine) -> dict[str, tuple[Status, Any]]:
    """Each run's status, with its result if it completed."""
    out = {}
    for r in await e.list():
        done = r.status == Status.COMPLETED
        out[r.id] = (r.status, await e.handle(r.id).result() if done else None)
    return out


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    home = tmp_path_factory.mktemp("fuzzhome") / "home"
    runs = asyncio.run(_fill(home))
    assert len(list((home / "journal").glob("*.seg"))) >= 3
    return home, runs


async def _open(home: Path) -> dict[str, tuple[Status, Any]]:
    async with engine(home) as e:
        return await _runs(e)


@FUZZ
@given(damages=st.lists(damage, min_size=1, max_size=3))
# The newest segment zeroed from its middle: the latest starts are gone.
@example(damages=[Truncate(-1, 400, shorten=False)])
def test_a_damaged_home_opens_with_a_prefix_or_names_the_damage(
    original: tuple[Path, dict[str, Any]], damages: list[Truncate | Flip | Garbage]
) -> None:
    source, before = original
    with tempfile.TemporaryDirectory() as d:
        home = Path(d) / "home"
        shutil.copytree(source, home)
        journal = home / "journal"
        files = {p.name: bytearray(p.read_bytes()) for p in sorted(journal.glob("*.seg"))}
        for dmg in damages:
            dmg.apply(files)
        write_out(journal, files)
        try:
            after = asyncio.run(_open(home))
        except JournalCorrupt as e:
            assert Path(e.path).parent == journal and f"byte {e.offset}" in str(e)
            event("refused: JournalCorrupt")
            return
        event("opened, every run" if after.keys() == before.keys() else "opened, fewer runs")
        assert set(after) <= set(before), "the damaged home shows a run that never was"
        for wid, (status, result) in after.items():
            if status == Status.COMPLETED:
                # A run that finished, there or only now (its lost steps ran again).
                assert (before[wid][1] if before[wid][0] == Status.COMPLETED else result) == result
        # What survived is a prefix: the runs started in order, so the ones kept
        # are the earliest (`list()` gives the newest first).
        order = list(before)[::-1]
        kept = [wid for wid in order if wid in after]
        assert kept == order[: len(kept)]
