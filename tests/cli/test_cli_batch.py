"""`fusee batch`: one act on every run a filter matches, from the command line (issue 38),
in a home nobody drives (the command drives it until the batch ends), and refused with
a one-line error and its exit code when the command is wrong."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import subprocess

import pytest
from processes import REPO, fusee_script

from fusee_runtime import Status


@pytest.fixture
def parked(make_engine, home):
    """Five runs of `cli_wait` parked on signal `go`: w-0 ... w-4."""

    async def park() -> None:
        async with make_engine() as engine:
            for i in range(5):
                await engine.start("cli_wait", None, id=f"w-{i}")
            await engine.wait_until(
                lambda: all(engine.runs.latest(f"w-{i}").status == Status.PARKED for i in range(5))
            )

    asyncio.run(park())


def test_a_dry_run_counts_then_a_batch_signals_each_run_once(cli, on, parked):
    r = cli("batch", "signal", "--workflow", "cli_wait", "--signal", "go", "--dry-run", *on)
    assert r.exit_code == 0, r.output
    # A signal batch acts on open runs: its status says so.
    assert (
        r.stderr == "5 run(s) match --status open --workflow cli_wait; a batch would signal each\n"
    )
    assert r.stdout.split() == [f"w-{i}" for i in reversed(range(5))]
    r = cli("batch", "signal", "--workflow", "cli_wait", "--signal", "go", "--value", "7",
            "--id", "b-1", "--json", *on)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["id"], doc["status"], doc["outcomes"]) == ("b-1", "completed", {"signalled": 5})
    r = cli("batch", "describe", "b-1", *on)
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(
        "batch b-1 (signal --status open --workflow cli_wait): completed; acted on 5 of 5 run(s): "
        "5 signalled"
    )
    assert all(f"w-{i}" in r.stdout for i in range(5)) and "signalled" in r.stdout
    listed = json.loads(cli("list", "--workflow", "cli_wait", "--json", *on).stdout)
    assert {run["status"] for run in listed} == {"completed"}
    r = cli("batch", "cancel", "--workflow", "cli_wait", "--json", *on)  # none open now
    assert (r.exit_code, json.loads(r.stdout)["outcomes"]) == (0, {}), r.output


def test_no_wait_records_the_batch_for_whoever_drives_the_home_next(cli, on, parked):
    r = cli("batch", "cancel", "--status", "open", "--id", "b-2", "--no-wait", *on)
    assert (r.exit_code, r.stdout) == (0, "b-2\n"), r.output
    assert r.stderr == (
        "batch b-2 recorded; it runs when a process next drives the home (fusee serve)\n"
    )
    doc = json.loads(cli("batch", "describe", "b-2", "--json", *on).stdout)
    assert (doc["status"], doc["acted"]) == ("running", 0)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("batch", "describe"), 2, "fusee batch describe takes the batch's ID"),
        (("batch", "describe", "nope"), 3, "no batch 'nope'"),
        (("batch", "cancel", "b-1"), 2, "fusee batch cancel takes no ID argument"),
        (("batch", "cancel"), 2, "a batch takes a filter: --where, --workflow or --status"),
        (("batch", "cancel", "--status", "open", "--rate", "0"), 2, "a batch's rate is a number"),
        (("batch", "reset", "--status", "failed"), 2, "a batch that resets takes --to"),
        (("batch", "reset", "--status", "failed", "--to", "0"), 2, "operation numbers start"),
        (("batch", "signal", "--status", "open"), 2, "a batch that signals takes --signal NAME"),
        (
            (
                "batch",
                "signal",
                "--status",
                "open",
                "--signal",
                "s",
                "--value",
                "[" * 300 + "]" * 300,
            ),
            2,
            "nested",
        ),
        (("batch", "describe", "w-0"), 3, "'w-0' is a run of workflow 'cli_wait', not a batch"),
        (("batch", "describe", "b-1", "--status", "open"), 2, "describe takes an ID, and --json"),
        (("batch", "cancel", "--status", "sleepy"), 2, "sleepy"),
        (("batch", "cancel", "--where", "a~1"), 2, "where"),
    ],
)
def test_a_wrong_batch_is_one_line_and_its_exit_code(cli, on, parked, args, code, message):
    r = cli(*args, *on)
    assert r.exit_code == code, r.output
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.output


def test_a_batch_in_a_home_with_no_journal_matches_no_run_and_records_nothing(cli, on, home):
    r = cli("batch", "cancel", "--status", "open", "--json", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["count"] == 0
    assert "no batch recorded" in r.stderr
    assert not home.exists()
    r = cli("batch", "cancel", *on)  # a wrong batch is wrong there too
    assert (r.exit_code, r.stderr.count("\n")) == (2, 1), r.output


def test_the_replay_check_passes_a_home_holding_a_batch(cli, on, parked):
    """A batch's code is the engine's: `fusee replay --all` says so, and fails nothing."""
    r = cli("batch", "cancel", "--status", "open", "--id", "b-3", "--no-wait", *on)
    assert r.exit_code == 0, r.output
    r = cli("replay", "--all", *on)
    assert r.exit_code == 0, r.output
    assert "b-3" in r.output


def test_on_a_terminal_a_progress_bar_follows_the_batch(make_engine, home, tmp_path):
    """Its stderr a real pseudo-terminal: the bar counts the runs acted on, of how many."""

    async def park() -> None:
        async with make_engine() as engine:
            for i in range(40):
                await engine.start("cli_wait", None, id=f"t-{i}")
            await engine.wait_until(
                lambda: all(engine.runs.latest(f"t-{i}").status == Status.PARKED for i in range(40))
            )

    asyncio.run(park())
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.pop("NO_COLOR", None)
    env.update(TERM="xterm", COLUMNS="120")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "cli"), str(REPO)])
    on = ["--home", str(home), "--app", "fusee_cli_testapp"]
    leader, terminal = pty.openpty()
    child = subprocess.Popen(
        [fusee_script(), "batch", "cancel", "--status", "open", "--rate", "20", "--id", "t-b", *on],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    raw = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: it exited and closed the terminal
                break
            if not chunk:
                break
            raw += chunk
    finally:
        child.communicate()
        os.close(leader)
    assert child.returncode == 0, raw
    text = raw.decode("utf-8", "replace")
    assert "batch t-b (cancel)" in text  # the bar's label
    counts = {int(n) for n in re.findall(r"(\d+)/40", text)}
    assert len(counts) >= 2 and max(counts) <= 40, text  # it moved
    assert "acted on 40 of 40 run(s): 40 cancelled" in text
