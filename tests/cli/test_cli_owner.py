"""Two `fusee` processes on one home: the owner drives the runs, the others talk to it.

Each test runs real `fusee` processes. The owner is a `fusee start` that
waits for a signal (the `approval` example); the tests read its status
lines to know where it is, never sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime.control import protocol


def _on(tmp_path: Path) -> list[str]:
    return ["--home", str(tmp_path / "home"), "--app", "workflows"]


def _owner(spawn, on: list[str], wid: str) -> subprocess.Popen[str]:
    """A `fusee start approval` that owns the home and serves it once its run is parked."""
    owner = spawn("start", "approval", "--id", wid, *on)
    assert owner.stderr is not None
    first = owner.stderr.readline()
    assert first.startswith(f"started {wid} (approval"), first
    # The progress line comes once the run waits; the socket is served by then.
    waiting = owner.stderr.readline()
    # approval waits a week for its decision, and says until when.
    assert waiting.startswith(f"{wid}: waiting for signal 'approve' until 20"), waiting
    assert waiting.endswith(" UTC\n"), waiting
    return owner


def test_a_signal_from_a_second_process_reaches_the_run_the_owner_drives(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")

    sent = fusee("signal", "ap-1", "approve", "true", *on)

    assert sent.returncode == 0, sent.stderr
    assert f"in the process that owns the home (pid {owner.pid})" in sent.stderr
    out, err = owner.communicate()
    assert owner.returncode == 0, err
    assert json.loads(out) == {"request": "ap-1", "approved": True, "paid_cents": 0}


def test_reading_commands_answer_from_the_owner(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")

    described = fusee("describe", "ap-1", "--json", *on)
    listed = fusee("list", "--json", *on)
    history = fusee("history", "ap-1", "--json", *on)

    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["status"] == "parked"
    assert [r["id"] for r in json.loads(listed.stdout)] == ["ap-1"]
    assert [r["type"] for r in json.loads(history.stdout)] == ["RunStarted", "WaitStarted"]
    fusee("signal", "ap-1", "approve", "false", *on)
    owner.communicate()
    assert owner.returncode == 0


def test_result_wait_from_a_second_process_follows_the_owners_run(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    follower = spawn("result", "ap-1", "--wait", "--json", *on)

    fusee("signal", "ap-1", "approve", "true", *on)

    out, err = follower.communicate()
    assert follower.returncode == 0, err
    doc = json.loads(out)
    assert (doc["status"], doc["result"]["approved"]) == ("completed", True)
    owner.communicate()
    assert owner.returncode == 0


def test_start_and_result_of_a_second_run_go_through_the_owner(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")

    started = fusee("start", "approval", "--id", "ap-2", "--detach", *on)
    assert started.returncode == 0, started.stderr
    assert started.stdout == "ap-2\n"
    fusee("signal", "ap-2", "approve", "true", *on)
    done = fusee("result", "ap-2", "--wait", *on)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["approved"] is True
    # The first run is still the owner's, waiting for its own signal.
    assert owner.poll() is None
    fusee("signal", "ap-1", "approve", "true", *on)
    owner.communicate()
    assert owner.returncode == 0


def test_a_killed_owner_leaves_a_stale_lock_that_the_next_command_takes_over(
    spawn, fusee, tmp_path
):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    owner.kill()
    owner.communicate()
    home = tmp_path / "home"
    assert (home / "control.sock").exists(), "a SIGKILL leaves the socket file behind"

    sent = fusee("signal", "ap-1", "approve", "true", *on)
    assert sent.returncode == 0, sent.stderr
    assert "when a process next drives the home" in sent.stderr
    done = fusee("result", "ap-1", "--wait", *on)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["approved"] is True


def test_ctrl_c_of_a_follower_leaves_the_run_to_its_owner(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    follower = spawn("start", "approval", "--id", "ap-1", *on)
    assert follower.stderr is not None
    assert follower.stderr.readline().startswith("run ap-1 already exists (approval, parked)")

    follower.send_signal(signal.SIGINT)
    _, err = follower.communicate()

    assert follower.returncode == 0, err
    assert f"goes on in the process that owns the home (pid {owner.pid})" in err
    assert "Traceback" not in err
    fusee("signal", "ap-1", "approve", "true", *on)
    owner.communicate()
    assert owner.returncode == 0


def test_the_socket_is_for_the_owner_only_and_goes_away_with_it(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    sock = tmp_path / "home" / "control.sock"

    mode = os.stat(sock).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600

    fusee("signal", "ap-1", "approve", "true", *on)
    owner.communicate()
    assert owner.returncode == 0
    assert not sock.exists()


def test_an_owner_that_stopped_answering_is_named_by_its_pid(
    spawn, cli, tmp_path, monkeypatch, bad_input
):
    # The owner accepts connections (the kernel does) but its process is
    # stopped: commands wait ANSWER_S (5 s; shortened here), then name it.
    monkeypatch.setattr(protocol, "ANSWER_S", 0.3)
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    os.kill(owner.pid, signal.SIGSTOP)
    try:
        r = cli("signal", "ap-1", "approve", "true", *on)
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    bad_input(r, 2, f"owned by pid {owner.pid}, which stopped answering")
    assert owner.poll() is None


@pytest.mark.parametrize("as_json", [False, True])
def test_an_unknown_id_from_the_owner_exits_3(spawn, fusee, tmp_path, as_json):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")

    r = fusee("describe", "nope", *on, *(["--json"] if as_json else []))

    assert r.returncode == 3
    assert r.stderr == "error: no run with id 'nope'\n"
    owner.kill()


def test_a_follower_takes_over_when_the_owner_goes_away(spawn, fusee, tmp_path):
    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    follower = spawn("start", "approval", "--id", "ap-1", *on)
    assert follower.stderr is not None
    assert follower.stderr.readline().startswith("run ap-1 already exists")
    assert follower.stderr.readline().startswith("ap-1: waiting for signal 'approve'")

    owner.send_signal(signal.SIGINT)  # the owner detaches and closes the home
    owner.communicate()
    assert follower.stderr.readline() == (
        f"the process that owned the home (pid {owner.pid}) went away; following ap-1 on\n"
    )
    sent = fusee("signal", "ap-1", "approve", "true", *on)

    assert f"(pid {follower.pid})" in sent.stderr  # the follower owns the home now
    out, err = follower.communicate()
    assert follower.returncode == 0, err
    assert json.loads(out)["approved"] is True


@pytest.mark.parametrize(
    ("command", "shown"),
    # A terminate answers once the run is closed; a cancel once it is recorded, the
    # run's compensations running (or, should they be done, closed).
    [("terminate", {"terminated"}), ("cancel", {"running", "cancelled"})],
)
def test_json_shows_the_run_the_act_left_when_its_owner_went_away_after_it(
    spawn, cli, tmp_path, monkeypatch, command, shown
):
    # The patch only orders what happens: the owner really exits after the command's
    # call that closes the run. The command reads nothing after its act: the act's answer
    # is the run as it left it.
    from fusee_runtime.control.client import ControlClient

    on = _on(tmp_path)
    owner = _owner(spawn, on, "ap-1")
    acted = getattr(ControlClient, command)

    async def then_the_owner_goes(self: ControlClient, id: str, reason: str) -> Any:
        answer = await acted(self, id, reason)
        # The owner's run closes (a cancel runs its compensations first), so the
        # `fusee start` that owns the home exits, before the command prints the run.
        await asyncio.to_thread(owner.communicate)
        return answer

    monkeypatch.setattr(ControlClient, command, then_the_owner_goes)
    r = cli(command, "ap-1", "--json", *on)

    assert r.exit_code == 0, r.output
    assert owner.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["id"] == "ap-1" and doc["status"] in shown
    assert (doc["closed_at"] is not None) == (doc["status"] != "running")


def test_detached_starts_and_results_without_wait_run_no_code(fusee, tmp_path):
    on = _on(tmp_path)
    assert fusee("start", "approval", "--id", "ap-1", "--detach", *on).returncode == 0
    assert fusee("signal", "ap-1", "approve", "true", *on).returncode == 0

    # Neither command drives the home: ap-1 has its signal but does not take it.
    assert fusee("start", "approval", "--id", "ap-2", "--detach", *on).returncode == 0
    assert fusee("result", "ap-1", *on).returncode == 4
    history = json.loads(fusee("history", "ap-1", "--json", *on).stdout)

    assert [r["type"] for r in history] == ["RunStarted", "SignalReceived"]


def test_children_are_seen_and_steered_through_the_owner(spawn, fusee, tmp_path):
    # The owner sends runs as orjson writes RunInfo: the parent as a pair.
    on = ["--home", str(tmp_path / "home"), "--app", "fusee_cli_testapp"]
    owner = spawn("start", "cli_family", "--input", '"terminate"', "--id", "fam", *on)
    assert owner.stderr is not None
    for line in owner.stderr:
        if line.startswith("fam: waiting for signal 'go'"):
            break
    else:
        raise AssertionError("the owner never got to its wait")
    kid = json.loads(fusee("describe", "fam-kid", "--json", *on).stdout)
    parent = json.loads(fusee("describe", "fam", "--json", *on).stdout)
    assert kid["parent"] == {"id": "fam", "run_id": parent["run_id"]}
    listed = fusee("list", "--parent", "fam", "--json", *on)
    assert listed.returncode == 0, listed.stderr
    assert [k["id"] for k in json.loads(listed.stdout)] == ["fam-kid"]
    shown = fusee("describe", "fam", *on, COLUMNS="100")
    assert shown.returncode == 0, shown.stderr
    assert "fam-kid parked (cli_wait)" in shown.stdout
    sent = fusee("signal", "fam-kid", "go", '"from a shell"', *on)
    assert sent.returncode == 0, sent.stderr
    assert fusee("signal", "fam", "go", *on).returncode == 0
    out, err = owner.communicate()
    assert owner.returncode == 0, err
    assert json.loads(out) == "done"
    done = json.loads(fusee("describe", "fam-kid", "--json", *on).stdout)
    assert done["status"] == "completed"
