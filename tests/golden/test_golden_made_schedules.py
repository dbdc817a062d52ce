"""The golden journal of schedules made at run time (`made_schedules/`: `ScheduleSet`,
`ScheduleDeleted`) opens to the same runs and no schedule (played again and encoded
again: see `test_golden_later.py`)."""

from __future__ import annotations

from pathlib import Path

import orjson

from fusee_runtime import Config, Engine, FakeClock
from fusee_runtime.control.wire import run_json

HERE = Path(__file__).resolve().parent / "made_schedules"
EXPECTED = orjson.loads((HERE / "expected.json").read_bytes())


async def test_the_home_opens_to_the_same_runs_and_no_schedule(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "journal").mkdir(parents=True)
    for segment in (HERE / "home" / "journal").iterdir():
        (home / "journal" / segment.name).write_bytes(segment.read_bytes())
    clock = FakeClock(1_700_000_000.0 + 400)
    config = Config(clock=clock, drive=False, segment_bytes=64 << 10, payload_bytes_max=16 << 10)
    async with Engine(home, app=None, config=config) as engine:
        assert [run_json(info) for info in await engine.list()] == EXPECTED["runs"]
        assert [s["name"] for s in engine.schedules.list() if s["made"]] == []  # deleted
