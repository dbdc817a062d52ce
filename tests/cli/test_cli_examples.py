"""The real `fusee`, in child processes, on the examples: signal, resume, reset.

Each command is its own process, as a person at a shell runs them: one
records (passively), a later `fusee result --wait` drives the run.
"""

from __future__ import annotations

import json
from pathlib import Path


def test_approval_takes_a_signal_sent_while_nobody_runs_it(fusee, tmp_path: Path):
    on = ["--home", str(tmp_path / "home")]
    started = fusee("start", "approval", "--detach", "--id", "ap-1", *on)
    assert started.returncode == 0, started.stderr
    assert started.stdout == "ap-1\n"

    signalled = fusee("signal", "ap-1", "approve", "true", *on)
    assert signalled.returncode == 0, signalled.stderr
    assert signalled.stdout == ""
    assert signalled.stderr.startswith("delivered signal 'approve' to ap-1: true;")

    done = fusee("result", "ap-1", "--wait", *on)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"request": "ap-1", "approved": True, "paid_cents": 0}
    assert "Traceback" not in done.stderr


def test_a_paused_flaky_run_resumes_once_fixed(fusee, tmp_path: Path):
    on = ["--home", str(tmp_path / "home")]
    started = fusee("start", "flaky", "--id", "fx-1", *on)
    assert started.returncode == 1, started.stderr
    assert started.stdout == ""
    assert started.stderr.splitlines()[-1] == (
        "error: run fx-1 is paused: paused in step 'fetch_rate' after attempt 2: "
        "ConnectionError: rates service unavailable (set FUSEE_FLAKY_FIXED=1 to bring it back)"
    )

    resumed = fusee("resume", "fx-1", *on, FUSEE_FLAKY_FIXED="1")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.startswith("resumed fx-1 (paused in step 'fetch_rate'")

    done = fusee("result", "fx-1", "--wait", *on, FUSEE_FLAKY_FIXED="1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"rate": 1.08, "cents": 1080}


def test_reset_starts_a_new_run_that_history_shows_beside_the_old(fusee, tmp_path: Path):
    on = ["--home", str(tmp_path / "home")]
    first = fusee("start", "order", "--input", "workflows/order.json", "--id", "o-1", *on)
    assert first.returncode == 0, first.stderr
    old = json.loads(fusee("describe", "o-1", "--json", *on).stdout)["run_id"]

    reset = fusee("reset", "o-1", "--to", "charge", *on)
    assert reset.returncode == 0, reset.stderr
    new = reset.stdout.strip()
    assert reset.stdout == new + "\n"
    assert new != old
    assert reset.stderr.startswith(f"reset o-1: run {old} stays completed; new run {new} ")

    shown = fusee("history", "o-1", "--json", *on)
    assert shown.returncode == 0, shown.stderr
    records = json.loads(shown.stdout)
    assert {r["run_id"] for r in records} == {old, new}
    (restart,) = [r for r in records if r["run_id"] == new]
    assert restart["type"] == "RunStarted"
    assert restart["origin"]["reset"] == old

    again = fusee("result", "o-1", "--wait", *on)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert (result["order"], result["payment"]["cents"]) == ("o-1", 1800)
    runs = json.loads(fusee("list", "--json", *on).stdout)
    assert [(r["run_id"], r["status"]) for r in runs] == [(new, "completed"), (old, "completed")]


def test_bad_input_leaves_the_journal_unchanged(fusee, tmp_path: Path):
    home = tmp_path / "home"
    on = ["--home", str(home)]
    assert fusee("start", "approval", "--detach", "--id", "ap-1", *on).returncode == 0
    before = {p.name: p.read_bytes() for p in sorted((home / "journal").glob("*.seg"))}
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  nope\n}\n")
    for args, code in [
        (["signal", "ap-1", "approve", "--input", str(bad)], 2),
        (["signal", "nobody", "approve", "true"], 3),
        (["resume", "ap-1"], 2),
        (["reset", "ap-1", "--to", "no_such_step"], 2),
        (["cancel", "nobody"], 3),
    ]:
        done = fusee(*args, *on)
        assert done.returncode == code, (args, done.stderr)
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("error: ")
    after = {p.name: p.read_bytes() for p in sorted((home / "journal").glob("*.seg"))}
    assert after == before
