"""A heartbeating step killed mid-way resumes from its last durable progress (issue 20,
item 1): a real child process copies rows, reporting each with a heartbeat; the test
SIGKILLs it mid-copy, reads what the journal holds, and a second life starts the step
again right after the last row the journal's last heartbeat reported."""

from __future__ import annotations

from pathlib import Path

from harness import Child, journal

from fusee_runtime.journal.records import R

ROWS = 100_000


def test_a_step_killed_mid_copy_resumes_after_its_last_durable_heartbeat(tmp_path: Path) -> None:
    home, ledger = tmp_path / "home", tmp_path / "ledger.jsonl"
    first = Child(home, ledger, script="heartbeat_child.py", args=("cp-1", str(ROWS)))
    assert first.read_until("START ") == "START 0"
    first.read_until("ROW 300")  # several flushes of heartbeats, some of them durable
    first.kill()
    reached = max(int(line.split()[1]) for line in first.lines if line.startswith("ROW "))

    beats = [rec for rec in journal(home) if rec[0] == R.StepHeartbeat]
    assert beats, "no heartbeat became durable in 300 rows"
    rows = [rec[5]["row"] for rec in beats]
    assert rows == sorted(rows), "progress never goes back"
    durable = rows[-1]
    assert durable <= reached
    assert len(beats) < reached / 2, "heartbeats are coalesced, not one record a row"

    second = Child(home, ledger, script="heartbeat_child.py", args=("cp-1", str(ROWS)))
    assert second.read_until("START ") == f"START {durable + 1}"
    second.kill()
