"""The golden journal of queues of runs (`queues/`: `QueueSet`, `RunAdmitted`,
`StartDebounced`) opens to
the same runs and the same queues (played again and encoded again: see
`test_golden_later.py`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from fusee_runtime import Config, Engine, FakeClock
from fusee_runtime.control.wire import run_json

HERE = Path(__file__).resolve().parent / "queues"
EXPECTED = orjson.loads((HERE / "expected.json").read_bytes())


async def test_the_home_opens_to_the_same_runs_and_queues(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "journal").mkdir(parents=True)
    for segment in (HERE / "home" / "journal").iterdir():
        (home / "journal" / segment.name).write_bytes(segment.read_bytes())
    clock = FakeClock(1_700_000_000.0 + 10)
    config = Config(clock=clock, drive=False, segment_bytes=64 << 10, payload_bytes_max=16 << 10)
    async with Engine(home, app=None, config=config) as engine:
        assert [run_json(info) for info in await engine.list()] == EXPECTED["runs"]
        assert [dataclasses.asdict(info) for info in engine.queues()] == EXPECTED["queues"]
