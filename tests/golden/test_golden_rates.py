"""The golden journal of rates over time (`rates/`): the record kind that came after the
first fixtures (`RateTaken`), played again by today's code to the same bytes, and read
back to the same runs and the same rate windows."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import orjson

from fusee_runtime import Config, Engine, FakeClock
from fusee_runtime.control.wire import run_json
from fusee_runtime.model import codec

HERE = Path(__file__).resolve().parent / "rates"
EXPECTED = orjson.loads((HERE / "expected.json").read_bytes())
MAKE = HERE / "make.py"


def _payloads(journal: Path) -> list[bytes]:
    sys.path.insert(0, str(HERE))
    try:
        import make
    finally:
        sys.path.remove(str(HERE))
    return make.payloads(journal)


def test_the_play_writes_the_same_records_and_says_the_same_today(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(MAKE), "--out", str(tmp_path), "--again"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    again, golden = _payloads(tmp_path / "home" / "journal"), _payloads(HERE / "home" / "journal")
    assert again == golden
    said = orjson.loads((tmp_path / "expected.json").read_bytes())
    assert said.pop("commit") is None
    assert said == {k: v for k, v in EXPECTED.items() if k != "commit"}


def test_every_record_encodes_again_to_its_bytes() -> None:
    golden = _payloads(HERE / "home" / "journal")
    assert len(golden) == EXPECTED["records"]
    for lsn, payload in enumerate(golden, 1):
        assert codec.encode(codec.decode(payload)) == payload, f"record {lsn}"


async def test_the_home_opens_to_the_same_runs_and_rate_windows(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "journal").mkdir(parents=True)
    for segment in (HERE / "home" / "journal").iterdir():
        (home / "journal" / segment.name).write_bytes(segment.read_bytes())
    clock = FakeClock(1_700_000_000.0 + 10)
    config = Config(clock=clock, drive=False, segment_bytes=64 << 10, payload_bytes_max=16 << 10)
    async with Engine(home, app=None, config=config) as engine:
        assert [run_json(info) for info in await engine.list()] == EXPECTED["runs"]
        rates = [dataclasses.asdict(info) for info in engine.driver.limits.rates.list()]
        assert rates == EXPECTED["rates"]
