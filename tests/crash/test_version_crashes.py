"""A change guarded by `ctx.patched` deployed while runs are open, with a real SIGKILL
of the engine's process between the deploys (issue 19): each process runs the code
of one deploy (APP_VERSION), as a restart after a deploy does."""

from __future__ import annotations

from pathlib import Path

from harness import Child, calls, journal

from fusee_runtime.journal.records import R


def life(home: Path, ledger: Path, version: str, *args: str, until: str | None = None) -> Child:
    env = {"APP_VERSION": version, **({"UNTIL": until} if until else {})}
    return Child(home, ledger, script="life_child.py", args=args, **env)


def killed_parked(home: Path, ledger: Path, version: str, *args: str) -> None:
    child = life(home, ledger, version, *args, until="parked")
    child.read_until("AT parked")
    child.kill()


def test_old_runs_finish_on_the_old_branch_across_kills_and_deploys(tmp_path: Path) -> None:
    home, ledger = tmp_path / "home", tmp_path / "ledger.jsonl"
    # Deploy 1: `old` passes the point where the fee will go; `before` waits ahead of it.
    killed_parked(home, ledger, "1", "start", "old", "versioned")
    killed_parked(home, ledger, "1", "signal", "old", "begin=null")
    killed_parked(home, ledger, "1", "start", "before", "versioned")
    # Deploy 2 (the fee, guarded): `before` gets there now; `new` starts.
    killed_parked(home, ledger, "2", "signal", "before", "begin=null")
    killed_parked(home, ledger, "2", "start", "new", "versioned")
    killed_parked(home, ledger, "2", "signal", "new", "begin=null")
    assert life(home, ledger, "2", "signal", "old", "go=null").finish() == 0  # the old branch
    # Deploy 3 (the old branch gone: deprecate_patch) once no open run took it.
    assert life(home, ledger, "3", "signal", "before", "go=null").finish() == 5
    assert life(home, ledger, "3", "signal", "new", "go=null").finish() == 5
    fees = calls(ledger, "fee")
    assert sorted(e["key"].split("/")[0] for e in fees) == ["before", "new"]  # once each
    marks = [r for r in journal(home) if r[0] == R.PatchMarked]
    assert [(r[2], r[3]) for r in marks] == [("2", "fee"), ("2", "fee")]
