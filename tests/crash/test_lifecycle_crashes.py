"""Timers, signals, pause, reset and race across a real SIGKILL of the engine process."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from harness import Child, calls, journal

from fusee_runtime.journal.records import R


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "home", tmp_path / "ledger.jsonl"


def life(home: Path, ledger: Path, *args: str, **env: str) -> Child:
    return Child(home, ledger, script="life_child.py", args=args, **env)


def test_a_sleep_across_a_kill_wakes_at_the_recorded_time(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    first = life(home, ledger, "start", "nap-1", "napper 0.5", UNTIL="parked")
    fire_at = orjson.loads(first.read_until("AT parked").removeprefix("AT parked "))
    first.kill()
    assert [e["step"] for e in calls(ledger, "before")] == ["before"]
    assert life(home, ledger, "wait", "nap-1").finish() == "rested"
    started = [r for r in journal(home) if r[0] == R.TimerStarted]
    assert [r[4] for r in started] == fire_at  # one timer, its instant never moved
    (after,) = calls(ledger, "after")
    assert after["t"] >= fire_at[0]
    assert len(calls(ledger, "before")) == 1


def test_a_signal_acknowledged_before_the_kill_is_delivered_exactly_once(
    paths: tuple[Path, Path],
) -> None:
    home, ledger = paths
    first = life(home, ledger, "start", "ap-1", "approver", UNTIL="parked")
    first.read_until("AT parked")
    first.kill()
    second = life(home, ledger, "signal", "ap-1", "approve=42", UNTIL="parked")
    second.read_until("SIGNALLED")
    second.kill()
    assert life(home, ledger, "wait", "ap-1").finish() == 42
    recs = journal(home)
    assert len([r for r in recs if r[0] == R.SignalReceived]) == 1
    assert [r[3:5] for r in recs if r[0] == R.WaitCompleted] == [[1, 42]]
    assert len(calls(ledger, "approved")) <= 2  # the step may rerun; the signal is taken once
    assert len({e["key"] for e in calls(ledger, "approved")}) == 1


def test_a_paused_run_stays_paused_across_a_kill_and_resumes(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    first = life(home, ledger, "start", "p-1", "pauser", UNTIL="parked")
    first.read_until("AT parked")
    first.kill()
    assert life(home, ledger, "describe", "p-1").finish("DESCRIBE ") == "paused"
    assert len(calls(ledger, "fragile")) == 1  # reopening did not run the paused step
    third = life(home, ledger, "resume", "p-1", FIXED="1")
    third.read_until("RESUMED")
    assert third.finish() == "fixed"
    runs = calls(ledger, "fragile")
    assert len(runs) == 2
    assert runs[0]["key"] == runs[1]["key"]


def test_a_reset_reruns_only_the_steps_after_the_reset_point(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    assert life(home, ledger, "start", "r-1", "three").finish() == ["one", "two", "three"]
    second = life(home, ledger, "reset", "r-1", "s2", CRASH_AT="in-s2")
    second.read_until("RESET")
    second.read_until("AT in-s2")
    second.kill()
    assert life(home, ledger, "wait", "r-1").finish() == ["one", "two", "three"]
    assert len(calls(ledger, "s1")) == 1
    s2 = calls(ledger, "s2")
    assert len(s2) == 3  # first run; the reset run, killed; the reset run again
    assert s2[0]["key"] != s2[1]["key"] == s2[2]["key"]
    assert len(calls(ledger, "s3")) == 2
    closes = [r[0] for r in journal(home) if r[0] in (R.RunCompleted, R.RunReset)]
    assert closes == [R.RunCompleted, R.RunCompleted]  # a closed run is reset by a new run
    starts = [r for r in journal(home) if r[0] == R.RunStarted]
    assert starts[1][7] == {"reset": starts[0][1], "before": 2}


def test_a_race_killed_after_its_winner_is_durable_replays_the_same_winner(
    paths: tuple[Path, Path],
) -> None:
    home, ledger = paths
    first = life(home, ledger, "start", "race-1", "racer", UNTIL="parked")
    first.read_until("AT parked")
    first.kill()
    second = life(home, ledger, "signal", "race-1", "go=7", UNTIL="won")
    second.read_until("AT won")
    second.kill()
    assert life(home, ledger, "wait", "race-1").finish() == [1, 7]
    recs = journal(home)
    assert [r[3] for r in recs if r[0] == R.RaceWon] == [1]
    retired = [r for r in recs if r[0] == R.OpCancelled]
    assert [(r[3], r[4]) for r in retired] == [("timer", "slow")]
    assert not [r for r in recs if r[0] == R.TimerFired]
