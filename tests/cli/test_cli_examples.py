"""The real `fusee`, in child processes, on the examples: signal, resume, reset, and
the help's examples of query, update and schedules.

Each command is its own process, as a person at a shell runs them: one
records (passively), a later `fusee result --wait` drives the run.
"""

from __future__ import annotations

import json
import shlex
import signal
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


def _example(fusee, *command: str) -> list[str]:
    """The arguments of the example in `fusee COMMAND --help`, as a shell would split them."""
    shown = fusee(*command, "--help", COLUMNS="200")
    assert shown.returncode == 0, shown.stderr
    (line,) = [x.strip() for x in shown.stdout.splitlines() if x.strip().startswith("Example:")]
    words = shlex.split(line.removeprefix("Example:"))
    assert words[:2] == ["fusee", *command], line
    return words[1:]


def test_the_help_examples_of_query_update_and_schedules_run_on_the_examples(
    fusee, spawn, tmp_path: Path
):
    # workflows/expenses.py answers the query and update examples; workflows/report.py
    # is the schedule that `fusee schedules --help` names. A run's handlers answer only
    # while a process drives it: `fusee serve`, as the module's docstring says.
    on = ["--home", str(tmp_path / "home")]
    server = spawn("serve", *on)
    assert server.stdout is not None
    serving = json.loads(server.stdout.readline())
    assert serving["event"] == "serving"
    assert serving["schedules"] == ["nightly-report"]
    started = fusee("start", "expenses", "--id", "trip-9", "--detach", *on)
    assert started.returncode == 0, started.stderr

    update = _example(fusee, "update")
    assert update[1] == "trip-9"
    first = fusee(*update, *on)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "50000\n"
    again = fusee(*update, *on)  # the same --update-id: applied once, answered the same
    assert (again.returncode, again.stdout) == (0, "50000\n"), again.stderr
    added = fusee("update", "trip-9", "add", '{"what": "train", "cents": 4200}', *on)
    assert (added.returncode, added.stdout) == (0, "4200\n"), added.stderr
    refused = fusee("update", "trip-9", "set-limit", "100", *on)
    assert refused.returncode == 2
    assert "at least the total (4200)" in refused.stderr

    query = _example(fusee, "query")
    assert query[1] == "trip-9"
    asked = fusee(*query, *on)
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout) == {"cents": 4200, "items": 1, "limit_cents": 50000}

    triggered = fusee("schedules", "trigger", "nightly-report", "--json", *on)
    assert triggered.returncode == 0, triggered.stderr
    night = json.loads(triggered.stdout)["id"]
    assert night.startswith("nightly-report@")
    reported = fusee("result", night, "--wait", *on)
    assert reported.returncode == 0, reported.stderr
    assert set(json.loads(reported.stdout)) == {"day", "orders", "refunds"}
    paused = fusee(*_example(fusee, "schedules"), *on)
    assert paused.returncode == 0, paused.stderr
    (row,) = json.loads(fusee("schedules", "--json", *on).stdout)
    assert (row["workflow"], row["paused"]) == ("nightly-report", True)

    assert fusee("signal", "trip-9", "submit", *on).returncode == 0
    done = fusee("result", "trip-9", "--wait", *on)
    assert done.returncode == 0, done.stderr
    filed = json.loads(done.stdout)
    assert (filed["limit_cents"], filed["total_cents"], filed["filed"]) == (50000, 4200, True)
    histories = json.loads(fusee("history", "trip-9", "--json", *on).stdout)
    applied = [r["name"] for r in histories if r["type"] == "UpdateApplied"]
    assert applied == ["set-limit", "add"]
    server.send_signal(signal.SIGTERM)
    assert server.wait() == 0
