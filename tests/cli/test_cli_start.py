"""`fusee start`: results, progress, detach, idempotent ids, failures, timeouts."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from fusee_runtime import Config, Engine, FakeClock

APP = "fusee_cli_testapp"
REPO = Path(__file__).resolve().parents[2]


def test_start_prints_the_result_on_stdout(cli, on, home):
    r = cli("start", "cli_echo", "--input", "-", "--id", "e-1", *on, input='{"n": 1}')
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"n": 1}
    assert "started e-1 (cli_echo" in r.stderr
    assert "Traceback" not in r.output


def test_start_order_example_runs_to_completion(cli, home, monkeypatch):
    monkeypatch.chdir(REPO)
    r = cli("start", "order", "--input", "workflows/order.json", "--id", "o-1", "--home", str(home))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["order"] == "o-1"
    assert out["payment"]["cents"] == 1800
    assert out["payment"]["key"].startswith("o-1/")


def test_start_json_prints_one_document(cli, on):
    r = cli("start", "cli_echo", "--input", "-", "--id", "e-2", "--json", *on, input="[1, 2]")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["id"] == "e-2"
    assert doc["workflow"] == "cli_echo"
    assert doc["status"] == "completed"
    assert doc["result"] == [1, 2]


def test_start_without_input_passes_none(cli, on):
    r = cli("start", "cli_echo", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) is None


def test_start_again_with_the_same_id_follows_the_first_run(cli, on):
    first = cli("start", "cli_echo", "--input", "-", "--id", "e-3", *on, input='"one"')
    again = cli("start", "cli_echo", "--input", "-", "--id", "e-3", *on, input='"two"')
    assert first.exit_code == again.exit_code == 0
    assert json.loads(again.stdout) == "one"
    assert "already exists" in again.stderr


def test_detach_prints_the_id_once_the_start_is_durable(cli, on, home):
    r = cli("start", "cli_hang", "--id", "h-1", "--detach", *on)
    assert r.exit_code == 0, r.output
    assert r.stdout == "h-1\n"

    async def check() -> None:
        # A fresh engine sees the run: the start was durable before the id was printed.
        async with Engine(home, app=APP, config=Config(clock=FakeClock())) as engine:
            info = await engine.handle("h-1").describe()
            assert info.workflow == "cli_hang"
            assert info.status == "running"

    asyncio.run(check())


def test_detach_json_describes_the_run(cli, on):
    r = cli("start", "cli_hang", "--id", "h-2", "--detach", "--json", *on)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["id"], doc["workflow"], doc["status"]) == ("h-2", "cli_hang", "running")


def test_a_failed_workflow_exits_1_with_the_failure(cli, on):
    r = cli("start", "cli_fail", "--input", "-", "--id", "f-1", *on, input='{"cents": 500}')
    assert r.exit_code == 1, r.output
    assert r.stdout == ""
    last = r.stderr.splitlines()[-1]
    assert last.startswith("error: run f-1 failed:")
    assert "card declined for 500 cents" in last
    assert "Traceback" not in r.output


def test_a_failed_workflow_with_json_prints_the_failure(cli, on):
    r = cli("start", "cli_fail", "--input", "-", "--id", "f-2", "--json", *on, input='{"cents": 1}')
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "failed"
    assert "card declined" in doc["error"]
    assert doc["failure"]["kind"] == "StepFailed"


def test_waiting_longer_than_timeout_exits_4(cli, on):
    r = cli("start", "cli_hang", "--id", "h-3", "--timeout", "0", *on)
    assert r.exit_code == 4, r.output
    assert "fusee result h-3 --wait" in r.stderr
    assert r.stdout == ""


def test_a_stuck_run_exits_1_and_says_why(cli, on, make_stuck):
    make_stuck()
    r = cli("start", "cli_shifty", "--id", "s-1", *on)
    assert r.exit_code == 1, r.output
    last = r.stderr.splitlines()[-1]
    assert last.startswith("error: run s-1 is stuck: replay mismatch")
    assert "'a'" in last and "'b'" in last


def test_start_uses_fusee_home_and_fusee_app_from_the_environment(cli, home):
    env = {"FUSEE_HOME": str(home), "FUSEE_APP": APP}
    r = cli("start", "cli_echo", "--input", "-", "--id", "env-1", input="3", env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == 3
    assert (home / "journal").is_dir()


def test_start_reads_the_app_from_pyproject(cli, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(f'[tool.fusee]\napp = "{APP}"\n')
    r = cli("start", "cli_echo", "--input", "-", input='"hi"')
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == "hi"
    assert (tmp_path / ".fusee" / "journal").is_dir()


def test_a_parked_run_says_what_it_waits_for_and_until_when(cli, on):
    r = cli("start", "cli_nap", "--id", "n-1", "--timeout", "0.2", *on)
    assert r.exit_code == 4, r.output
    until = r"until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.search(f"^n-1: waiting for signal 'wake' {until}$", r.stderr, re.M), r.stderr
    r = cli("signal", "n-1", "wake", *on)
    assert r.exit_code == 0, r.output
    r = cli("result", "n-1", "--wait", "--timeout", "0.2", *on)
    assert r.exit_code == 4, r.output
    assert re.search(f"^n-1: sleeping {until}$", r.stderr, re.M) is None  # result shows no progress
    described = cli("describe", "n-1", *on)
    assert described.exit_code == 0


def test_start_again_on_a_parked_run_with_no_owner_says_parked(waiting, spawn, fusee, on):
    # (Issue 42, item 8: it said `running`: the command opened the home and spawned the
    # run again, which showed running until its code, replayed, parked again.)
    again = spawn("start", "cli_wait", "--id", "w-1", *on)
    assert again.stderr is not None
    assert again.stderr.readline() == "run w-1 already exists (cli_wait, parked); following it\n"
    assert again.stderr.readline() == "w-1: waiting for signal 'go'\n"
    assert json.loads(fusee("describe", "w-1", "--json", *on).stdout)["status"] == "parked"

    assert fusee("signal", "w-1", "go", '"on"', *on).returncode == 0
    out, err = again.communicate()
    assert (again.returncode, json.loads(out)) == (0, "on"), err
