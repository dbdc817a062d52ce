"""The golden journals of the record kinds that came after the first fixture, each in a
folder of its own with its `make.py` (`made_schedules/`: `ScheduleSet`,
`ScheduleDeleted`; `rates/`: `RateTaken`, `RateSet`; `queues/`: `QueueSet`,
`RunAdmitted`, `StartDebounced`): each played again by today's code to the same bytes,
and each record encoded again to its bytes. What each home opens to is in its own test
file (`test_golden_<name>.py`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from fusee_runtime.model import codec

GOLDEN = Path(__file__).resolve().parent
LATER = ("made_schedules", "rates", "queues")


def payloads(fixture: Path, journal: Path) -> list[bytes]:
    """Every record payload of a local journal, read as the fixture's `make.py` does."""
    sys.path.insert(0, str(fixture))
    try:
        import make
    finally:
        sys.path.remove(str(fixture))
        sys.modules.pop("make", None)
    return make.payloads(journal)


@pytest.mark.parametrize("name", LATER)
def test_the_play_writes_the_same_records_and_says_the_same_today(
    name: str, tmp_path: Path
) -> None:
    fixture = GOLDEN / name
    done = subprocess.run(
        [sys.executable, str(fixture / "make.py"), "--out", str(tmp_path), "--again"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    again = payloads(fixture, tmp_path / "home" / "journal")
    assert again == payloads(fixture, fixture / "home" / "journal")
    said = orjson.loads((tmp_path / "expected.json").read_bytes())
    expected = orjson.loads((fixture / "expected.json").read_bytes())
    assert said.pop("commit") is None
    assert said == {k: v for k, v in expected.items() if k != "commit"}


@pytest.mark.parametrize("name", LATER)
def test_every_record_encodes_again_to_its_bytes(name: str) -> None:
    fixture = GOLDEN / name
    golden = payloads(fixture, fixture / "home" / "journal")
    assert len(golden) == orjson.loads((fixture / "expected.json").read_bytes())["records"]
    for lsn, payload in enumerate(golden, 1):
        assert codec.encode(codec.decode(payload)) == payload, f"{name}: record {lsn}"
