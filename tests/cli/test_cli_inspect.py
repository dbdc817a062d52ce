"""`fusee result`, `describe`, `list` and `history`: reading runs, and their exit codes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fusee_cli.app import app

APP = "fusee_cli_testapp"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One home for the module: a completed run (e-1), a failed one (f-1), an open one (h-1).

    Returns the `--home` and `--app` options that point at it. The tests
    only read it: `result` of the open run stops it again, unchanged.
    """
    home = tmp_path_factory.mktemp("runs") / "home"
    on = ["--home", str(home), "--app", APP]
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(Path(__file__).resolve().parent))
        for name in ("FUSEE_HOME", "FUSEE_APP"):
            mp.delenv(name, raising=False)
        for args, stdin, code in [
            (["cli_echo", "--input", "-", "--id", "e-1"], '{"a": 1}', 0),
            (["cli_fail", "--input", "-", "--id", "f-1"], '{"cents": 9}', 1),
            (["cli_hang", "--id", "h-1", "--detach"], None, 0),
        ]:
            r = runner.invoke(app, ["start", *args, *on], input=stdin)
            assert r.exit_code == code, r.output
    return on


def test_result_prints_a_completed_runs_result(cli, runs):
    r = cli("result", "e-1", *runs)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"a": 1}


def test_result_json_wraps_the_result_in_the_runs_state(cli, runs):
    doc = json.loads(cli("result", "e-1", "--json", *runs).stdout)
    assert doc["status"] == "completed"
    assert doc["result"] == {"a": 1}


def test_result_of_a_failed_run_exits_1(cli, runs):
    r = cli("result", "f-1", *runs)
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("error: run f-1 failed:")
    assert "card declined for 9 cents" in r.stderr


def test_result_of_an_open_run_without_wait_exits_4(cli, runs):
    r = cli("result", "h-1", *runs)
    assert r.exit_code == 4, r.output
    assert "has not finished (status running)" in r.stderr
    assert "fusee result h-1 --wait" in r.stderr


def test_result_wait_runs_an_ownerless_run_to_completion(cli, on, home, make_engine):
    async def start_only() -> None:
        async with make_engine() as engine:
            await engine.start("cli_echo", "later", id="e-9")
            # Closing right away stops the run before its step: it stays open.

    asyncio.run(start_only())
    assert json.loads(cli("describe", "e-9", "--json", *on).stdout)["status"] == "running"
    r = cli("result", "e-9", "--wait", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == "later"


def test_result_wait_with_timeout_exits_4(cli, runs):
    r = cli("result", "h-1", "--wait", "--timeout", "0", *runs)
    assert r.exit_code == 4, r.output
    assert "has not finished" in r.stderr


def test_describe_shows_a_run(cli, runs):
    r = cli("describe", "f-1", *runs)
    assert r.exit_code == 0, r.output
    assert "cli_fail" in r.stdout
    assert "failed" in r.stdout
    assert "card declined" in r.stdout


def test_describe_json(cli, runs):
    doc = json.loads(cli("describe", "h-1", "--json", *runs).stdout)
    assert doc["id"] == "h-1"
    assert doc["workflow"] == "cli_hang"
    assert doc["status"] == "running"
    assert doc["closed_at"] is None
    assert set(doc) == {
        "id",
        "run_id",
        "workflow",
        "status",
        "started_at",
        "closed_at",
        "error",
        "attributes",
        "failure",
        "waiting",
        "parent",
    }
    assert doc["parent"] is None


def test_list_json_is_newest_first(cli, runs):
    r = cli("list", "--json", *runs)
    assert r.exit_code == 0, r.output
    assert [d["id"] for d in json.loads(r.stdout)] == ["h-1", "f-1", "e-1"]


def test_list_filters_by_status_and_workflow(cli, runs):
    by_status = json.loads(cli("list", "--status", "failed", "--json", *runs).stdout)
    assert [d["id"] for d in by_status] == ["f-1"]
    by_workflow = json.loads(cli("list", "--workflow", "cli_echo", "--json", *runs).stdout)
    assert [d["id"] for d in by_workflow] == ["e-1"]


def test_list_table_names_every_run(cli, runs):
    r = cli("list", *runs)
    assert r.exit_code == 0, r.output
    for text in ("e-1", "f-1", "h-1", "completed", "failed", "running"):
        assert text in r.stdout


def test_list_of_an_empty_home_is_empty_and_creates_nothing(cli, on, home):
    r = cli("list", "--json", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == []
    # A home that does not exist is said so (a typo in --home is no empty home).
    assert (
        cli("list", *on).stderr == f"no runs: there is no home at {home} (--home or FUSEE_HOME)\n"
    )
    assert not home.exists()
    home.mkdir()
    assert cli("list", *on).stderr == "no runs\n"


def test_history_json_lists_the_records(cli, runs):
    r = cli("history", "e-1", "--json", *runs)
    assert r.exit_code == 0, r.output
    records = json.loads(r.stdout)
    assert [rec["type"] for rec in records] == ["RunStarted", "StepCompleted", "RunCompleted"]
    assert records[1]["name"] == "echo"
    assert records[2]["result"] == {"a": 1}


def test_history_table_shows_steps_and_failures(cli, runs):
    r = cli("history", "f-1", *runs)
    assert r.exit_code == 0, r.output
    for text in ("RunStarted", "StepFailed", "decline", "RunFailed", "card declined"):
        assert text in r.stdout


@pytest.mark.parametrize("command", ["result", "describe", "history"])
def test_an_unknown_id_exits_3(cli, runs, command, bad_input):
    bad_input(cli(command, "nope", *runs), 3, "no run with id 'nope'")


@pytest.mark.parametrize("command", ["result", "describe", "history"])
def test_an_unknown_id_in_a_home_never_opened_exits_3(cli, on, home, command, bad_input):
    bad_input(cli(command, "nope", *on), 3, "no run with id 'nope'")
    assert not home.exists()


def test_tables_respect_no_color(cli, runs):
    colored = cli("list", *runs, env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    plain = cli("list", *runs, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert colored.exit_code == plain.exit_code == 0
    color = re.compile(r"\x1b\[[\d;]*\b(3[0-8]|9[0-7])[;m]")
    assert color.search(colored.stdout)
    assert not color.search(plain.stdout)
    assert "h-1" in plain.stdout
