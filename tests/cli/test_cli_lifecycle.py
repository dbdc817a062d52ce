"""`fusee resume`, `cancel`, `terminate` and `reset`: acting on a run, and their exit codes.

Each opens the home passively: what it records is durable when it returns,
and the run acts on it the next time a process drives the home (here,
`fusee result --wait`).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from fusee_runtime import Status


def doc(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def records(cli, on, workflow_id: str) -> list[dict]:
    return doc(cli("history", workflow_id, "--json", *on))


@pytest.fixture
def paused(cli, on, home, journal):
    """Run p-1 (`cli_pause`), paused after its step's one attempt; returns the journal."""
    r = cli("start", "cli_pause", "--id", "p-1", *on)
    assert r.exit_code == 1, r.output
    assert r.stderr.splitlines()[-1] == (
        "error: run p-1 is paused: paused in step 'wobble' after attempt 1: "
        "ConnectionError: wobbly service"
    )
    return journal(home)


@pytest.fixture
def done(cli, on, home, journal):
    """Run e-1 (`cli_echo`), completed; returns the journal."""
    assert cli("start", "cli_echo", "--input", "-", "--id", "e-1", *on, input='"x"').exit_code == 0
    return journal(home)


# -- resume ----------------------------------------------------------------------


def test_resume_runs_a_paused_step_again_when_the_run_is_driven(cli, on, paused, testapp):
    testapp.FIXED = True
    r = cli("resume", "p-1", *on)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr == (
        "resumed p-1 (paused in step 'wobble' after attempt 1: ConnectionError: wobbly "
        "service); it goes on when a process next drives the home: `fusee result p-1 --wait`\n"
    )
    kinds = [rec["type"] for rec in records(cli, on, "p-1")]
    assert kinds[-1] == "StepResumed"  # recorded; the step did not run here
    r = cli("result", "p-1", "--wait", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == "steady"


def test_resume_json_shows_the_run_running_again(cli, on, paused):
    info = doc(cli("resume", "p-1", "--json", *on))
    assert (info["id"], info["status"], info["error"]) == ("p-1", "running", None)


def test_a_step_that_fails_again_pauses_again(cli, on, paused):
    assert cli("resume", "p-1", *on).exit_code == 0
    r = cli("result", "p-1", "--wait", *on)
    assert r.exit_code == 1, r.output
    assert "is paused: paused in step 'wobble'" in r.stderr


def test_resume_of_a_running_run_exits_2(cli, on, home, journal, bad_input):
    assert cli("start", "cli_hang", "--id", "h-1", "--detach", *on).exit_code == 0
    before = journal(home)
    line = bad_input(
        cli("resume", "h-1", *on), 2, "run 'h-1' is running: only a paused or stuck run resumes"
    )
    assert line.endswith(
        "if it was reported stuck, `fusee result h-1 --wait` retries it with the code loaded now"
    )
    assert journal(home) == before


def test_resume_of_a_closed_run_exits_2(cli, on, home, done, journal, bad_input):
    bad_input(cli("resume", "e-1", *on), 2, "run 'e-1' is closed (completed)")
    assert journal(home) == done


def test_resume_retries_a_stuck_run(cli, on, testapp, monkeypatch, make_stuck):
    make_stuck()
    assert cli("result", "s-1", "--wait", *on).exit_code == 1  # stuck: replay mismatch
    # Why it stopped is recorded: a command that opens the home passively sees it too.
    info = doc(cli("describe", "s-1", "--json", *on))
    assert info["status"] == "stuck" and "replay mismatch" in info["error"]
    monkeypatch.setattr(testapp, "SHAPE", "a")  # the fix is deployed
    r = cli("resume", "s-1", *on)
    assert r.exit_code == 0, r.output
    info = doc(cli("describe", "s-1", "--json", *on))
    assert (info["status"], info["error"]) == ("running", None)
    kinds = [rec["type"] for rec in records(cli, on, "s-1")]
    assert kinds[-2:] == ["RunStuck", "RunUnstuck"]


def test_result_wait_carries_on_a_stuck_run_whose_code_was_fixed(
    cli, on, testapp, monkeypatch, make_engine
):
    async def first_version() -> None:
        async with make_engine() as engine:
            await engine.start("cli_mend", None, id="m-1")
            await engine.wait_until(lambda: engine.runs.latest("m-1").status == Status.PARKED)

    asyncio.run(first_version())  # m-1 recorded step "a" and waits for signal "go"
    monkeypatch.setattr(testapp, "SHAPE", "b")  # its code changes under it
    for _ in range(2):  # stuck under the code loaded now, recorded or not yet: exit 1
        r = cli("result", "m-1", "--wait", *on)
        assert r.exit_code == 1, r.output
        assert r.stderr.splitlines()[-1].startswith("error: run m-1 is stuck: replay mismatch")
    assert cli("signal", "m-1", "go", "5", *on).exit_code == 0
    monkeypatch.setattr(testapp, "SHAPE", "a")  # the fix is deployed
    r = cli("result", "m-1", "--wait", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == 5
    kinds = [rec["type"] for rec in records(cli, on, "m-1")]
    assert kinds.count("RunStuck") == 1
    assert kinds.index("RunStuck") < kinds.index("RunUnstuck") < kinds.index("RunCompleted")


# -- cancel ----------------------------------------------------------------------


def test_cancel_closes_the_run_as_cancelled_when_it_is_driven(cli, on):
    assert cli("start", "cli_wait", "--id", "w-1", "--detach", *on).exit_code == 0
    r = cli("cancel", "w-1", "--reason", "changed my mind", *on)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr.startswith(
        "cancel of w-1 recorded (changed my mind); it runs its compensations"
    )
    # Open until its code takes the cancel: the wait it was parked on is cancelled.
    assert doc(cli("describe", "w-1", "--json", *on))["status"] == "running"
    r = cli("result", "w-1", "--wait", *on)
    assert r.exit_code == 1, r.output
    assert r.stderr == "error: run 'w-1' was cancelled: changed my mind\n"
    assert doc(cli("describe", "w-1", "--json", *on))["status"] == "cancelled"


def test_cancel_has_a_default_reason(cli, on):
    assert cli("start", "cli_wait", "--id", "w-2", "--detach", *on).exit_code == 0
    info = doc(cli("cancel", "w-2", "--json", *on))
    assert (info["id"], info["status"]) == ("w-2", "running")
    r = cli("result", "w-2", "--wait", *on)
    assert r.exit_code == 1
    assert "cancelled: requested with fusee cancel" in r.stderr
    (rec,) = [rec for rec in records(cli, on, "w-2") if rec["type"] == "CancelRequested"]
    assert rec["reason"] == "requested with fusee cancel"


def test_cancel_of_a_closed_run_exits_2(cli, on, home, done, journal, bad_input):
    bad_input(cli("cancel", "e-1", *on), 2, "run 'e-1' is already closed (completed)")
    assert journal(home) == done


# -- terminate -------------------------------------------------------------------


def test_terminate_closes_the_run_at_once(cli, on):
    assert cli("start", "cli_hang", "--id", "h-1", "--detach", *on).exit_code == 0
    r = cli("terminate", "h-1", "--reason", "retired", *on)
    assert r.exit_code == 0, r.output
    assert r.stderr == "terminated h-1 (it was running): retired\n"
    assert doc(cli("describe", "h-1", "--json", *on))["status"] == "terminated"
    r = cli("result", "h-1", "--wait", *on)
    assert r.exit_code == 1, r.output
    assert r.stderr == "error: run 'h-1' was terminated: retired\n"


def test_terminate_json_shows_the_closed_run(cli, on):
    assert cli("start", "cli_hang", "--id", "h-2", "--detach", *on).exit_code == 0
    info = doc(cli("terminate", "h-2", "--json", *on))
    assert (info["id"], info["status"]) == ("h-2", "terminated")
    assert info["closed_at"] is not None


def test_terminate_of_a_closed_run_exits_2(cli, on, home, done, journal, bad_input):
    bad_input(cli("terminate", "e-1", *on), 2, "run 'e-1' is already closed (completed)")
    assert journal(home) == done


# -- reset -----------------------------------------------------------------------


@pytest.fixture
def pair(cli, on, home, journal, testapp):
    """Run r-1 (`cli_pair`: steps first, second), completed; returns the journal."""
    r = cli("start", "cli_pair", "--input", "-", "--id", "r-1", *on, input="7")
    assert r.exit_code == 0, r.output
    assert testapp.CALLS == ["first", "second"]
    return journal(home)


def test_reset_to_a_step_runs_it_and_what_follows_again(cli, on, pair, testapp):
    old = doc(cli("describe", "r-1", "--json", *on))["run_id"]
    r = cli("reset", "r-1", "--to", "second", *on)
    assert r.exit_code == 0, r.output
    new = r.stdout.strip()
    assert r.stdout == new + "\n"
    assert r.stderr == (
        f"reset r-1: run {old} stays completed; new run {new} keeps operations before #2 "
        "and runs the rest when a process next drives the home: `fusee result r-1 --wait`\n"
    )
    assert testapp.CALLS == ["first", "second"]  # nothing ran here
    assert doc(cli("describe", "r-1", "--json", *on))["run_id"] == new
    r = cli("result", "r-1", "--wait", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [7, 7]
    assert testapp.CALLS == ["first", "second", "second"]


def test_reset_to_an_operation_number(cli, on, pair, testapp):
    assert cli("reset", "r-1", "--to", "1", *on).exit_code == 0
    assert doc(cli("result", "r-1", "--wait", "--json", *on))["result"] == [7, 7]
    assert testapp.CALLS == ["first", "second", "first", "second"]


def test_reset_json_names_the_old_run(cli, on, pair):
    old = doc(cli("describe", "r-1", "--json", *on))["run_id"]
    info = doc(cli("reset", "r-1", "--to", "second", "--json", *on))
    assert info["id"] == "r-1"
    assert info["run_id"] != old
    assert info["status"] == "running"
    assert info["origin"] == {"reset": old, "before": 2}


def test_history_shows_both_runs(cli, on, pair):
    old = doc(cli("describe", "r-1", "--json", *on))["run_id"]
    new = cli("reset", "r-1", "--to", "second", *on).stdout.strip()
    recs = records(cli, on, "r-1")
    assert {rec["run_id"] for rec in recs} == {old, new}
    # The old run had completed: it keeps its RunCompleted, and the new one names it.
    assert [rec["type"] for rec in recs if rec["run_id"] == old][-1] == "RunCompleted"
    (started,) = [rec for rec in recs if rec["run_id"] == new]
    assert started["type"] == "RunStarted"
    assert started["origin"] == {"reset": old, "before": 2}
    table = cli("history", "r-1", *on, env={"COLUMNS": "200"})
    assert f"(reset of run {old}, from operation #2)" in table.stdout  # the whole run id


def test_reset_of_an_open_run_closes_it_as_reset(cli, on, home):
    assert cli("start", "cli_wait", "--id", "w-1", "--detach", *on).exit_code == 0
    old = doc(cli("describe", "w-1", "--json", *on))["run_id"]
    r = cli("reset", "w-1", "--to", "1", *on)
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(f"reset w-1: run {old} closed as reset; new run ")
    recs = records(cli, on, "w-1")
    assert [rec["type"] for rec in recs if rec["run_id"] == old][-1] == "RunReset"
    assert "RunReset" in cli("history", "w-1", *on, env={"COLUMNS": "200"}).stdout
    assert cli("signal", "w-1", "go", '"again"', *on).exit_code == 0
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == "again"
    statuses = [d["status"] for d in doc(cli("list", "--json", *on))]
    assert statuses == ["completed", "reset"]


@pytest.mark.parametrize(
    ("to", "fragment"),
    [
        ("0", "operation numbers start at 1"),
        ("-3", "operation numbers start at 1"),
        (
            "nope",
            "run 'r-1' has no operation named 'nope'; --to takes an operation number from 1 "
            "to 3 or the name of a step (first, second)",
        ),
        ("", "--to takes an operation number, a position or an operation's name"),
    ],
)
def test_reset_to_a_bad_point_exits_2(cli, on, home, pair, journal, bad_input, to, fragment):
    bad_input(cli("reset", "r-1", *on, "--to", to), 2, fragment)
    assert journal(home) == pair


def test_reset_without_to_is_a_usage_error(cli, on, home, pair, journal):
    r = cli("reset", "r-1", *on)
    assert r.exit_code == 2, r.output
    assert "--to" in r.stderr
    assert journal(home) == pair


# -- every command ---------------------------------------------------------------

ACTIONS = [
    ["resume", "nope"],
    ["cancel", "nope"],
    ["terminate", "nope"],
    ["reset", "nope", "--to", "1"],
]


@pytest.mark.parametrize("args", ACTIONS)
def test_an_unknown_id_exits_3(cli, on, home, done, journal, bad_input, args):
    bad_input(cli(*args, *on), 3, "no run with id 'nope'")
    assert journal(home) == done


@pytest.mark.parametrize("args", ACTIONS)
def test_an_unknown_id_in_a_home_never_opened_exits_3(cli, on, home, bad_input, args):
    bad_input(cli(*args, *on), 3, "no run with id 'nope'")
    assert not home.exists()


@pytest.mark.parametrize("command", ["resume", "cancel", "terminate", "reset"])
def test_a_bad_id_exits_2(cli, on, home, bad_input, command):
    bad_input(
        cli(command, "a/b", "--to", "1", *on) if command == "reset" else cli(command, "a/b", *on),
        2,
        "may not contain '/'",
    )
    assert not home.exists()
