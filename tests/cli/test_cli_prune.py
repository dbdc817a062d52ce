"""`fusee prune --older-than` and `fusee serve --retention`: old closed runs leave the
history store; open runs stay however old, and so do recent closed ones.

The old runs are made in this process on a fake clock set `PAST_DAYS` days
back (a `fusee` child reads the wall clock, so it cannot make them); the
recent one through the CLI, now. A `fusee serve` child is followed through
the JSON lines it prints, never by waiting on time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from typing import Any

import pytest

from fusee_cli.options import duration
from fusee_cli.session import CliError
from fusee_runtime import FakeClock, RunFailed

DAY_S = 86_400
PAST_DAYS = 30
"""How long ago the old runs closed (and the open one started)."""
WEEK_S = 7 * DAY_S
FORMS = "takes a duration such as 30d, 12h, 90m, 45s, 2w or plain seconds (3600)"


@pytest.fixture
def aged(cli, on, make_engine) -> None:
    """e-old (completed) and f-old (failed), closed `PAST_DAYS` ago; w-old, started then
    and still open (waiting for a signal); e-new, completed just now."""

    async def the_past() -> None:
        async with make_engine(clock=FakeClock(time.time() - PAST_DAYS * DAY_S)) as engine:
            assert await (await engine.start("cli_echo", "x", id="e-old")).result() == "x"
            with pytest.raises(RunFailed):
                await (await engine.start("cli_fail", {"cents": 5}, id="f-old")).result()
            await engine.start("cli_wait", None, id="w-old")

    asyncio.run(the_past())
    r = cli("start", "cli_echo", "--input", "-", "--id", "e-new", *on, input='"y"')
    assert r.exit_code == 0, r.output


def ids(cli, on) -> set[str]:
    r = cli("list", "--json", *on)
    assert r.exit_code == 0, r.output
    return {run["id"] for run in json.loads(r.stdout)}


ALL = {"e-old", "f-old", "w-old", "e-new"}


# -- with no owner: the command opens the home itself -------------------------------


def test_prune_deletes_only_closed_runs_older_than_the_duration(cli, on, aged):
    r = cli("prune", "--older-than", f"{PAST_DAYS * 2}d", *on)
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(f"pruned 0 runs closed over {PAST_DAYS * 2}d ago"), r.stderr
    assert ids(cli, on) == ALL

    r = cli("prune", "--older-than", "7d", *on)

    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr.startswith("pruned 2 runs closed over 7d ago from the history of "), r.stderr
    assert "owner" not in r.stderr  # no owner ran: this command pruned
    assert ids(cli, on) == {"w-old", "e-new"}  # open however old, or closed recently
    gone = cli("describe", "e-old", *on)
    assert gone.exit_code == 3, gone.output
    kept = cli("describe", "w-old", "--json", *on)
    assert json.loads(kept.stdout)["status"] in ("running", "parked")


def test_prune_older_than_zero_deletes_every_closed_run_and_no_open_one(cli, on, aged):
    r = cli("prune", "--older-than", "0", "--json", *on)

    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"pruned": 3, "older_than_s": 0.0}
    assert ids(cli, on) == {"w-old"}
    # The open run still takes its signal and completes, now.
    assert cli("signal", "w-old", "go", '"late"', *on).exit_code == 0
    r = cli("result", "w-old", "--wait", *on)
    assert (r.exit_code, json.loads(r.stdout)) == (0, "late")


def test_prune_json_says_how_many_and_the_age_in_seconds(cli, on, aged):
    r = cli("prune", "--older-than", "2w", "--json", *on)

    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"pruned": 2, "older_than_s": 2 * WEEK_S}
    assert r.stderr == ""


def test_prune_of_a_home_with_no_journal_says_so_and_creates_nothing(cli, on, home):
    r = cli("prune", "--older-than", "7d", *on)
    assert (r.exit_code, r.stdout) == (0, ""), r.output
    assert r.stderr == f"no runs to prune: nothing was ever recorded in {home}\n"

    r = cli("prune", "--older-than", "7d", "--json", *on)
    assert json.loads(r.stdout) == {"pruned": 0, "older_than_s": float(WEEK_S)}
    assert not home.exists()


# -- through the owner --------------------------------------------------------------


def served(spawn, *args: str) -> subprocess.Popen[str]:
    """A `fusee serve` child, returned once it serves the home."""
    owner = spawn("serve", *args)
    event(owner, "serving")
    return owner


def event(owner: subprocess.Popen[str], name: str, fragment: str = "") -> dict[str, Any]:
    """The owner's next JSON event named `name` (a `log` event: whose message has `fragment`)."""
    assert owner.stdout is not None
    for raw in owner.stdout:
        doc = json.loads(raw)
        if doc["event"] == name and fragment in doc.get("message", ""):
            return doc
    _, err = owner.communicate()
    raise AssertionError(f"serve ended (exit {owner.returncode}) before {name!r}: {err}")


def stopped(owner: subprocess.Popen[str]) -> tuple[int, str]:
    """Stops the owner with SIGTERM; its exit code and the rest of its stdout."""
    owner.send_signal(signal.SIGTERM)
    out, err = owner.communicate()
    assert "Traceback" not in err, err
    return owner.returncode, out


def test_prune_goes_through_the_owner_that_serves_the_home(cli, on, aged, spawn):
    owner = served(spawn, *on)

    r = cli("prune", "--older-than", "7d", *on)

    assert r.exit_code == 0, r.output
    assert r.stderr.rstrip("\n").endswith(f"(by its owner, pid {owner.pid})"), r.stderr
    assert r.stderr.startswith("pruned 2 runs closed over 7d ago"), r.stderr
    assert ids(cli, on) == {"w-old", "e-new"}  # as the owner lists them
    r = cli("prune", "--older-than", "0", "--json", *on)
    assert json.loads(r.stdout) == {"pruned": 1, "older_than_s": 0.0}
    assert stopped(owner)[0] == 0
    assert ids(cli, on) == {"w-old"}  # and the home, reopened, agrees


def test_serve_with_retention_prunes_old_closed_runs_on_start(cli, on, aged, spawn):
    owner = spawn("serve", "--retention", "7d", *on)

    deleted = event(owner, "log", "retention deleted")

    assert deleted["message"] == "fusee: retention deleted 2 closed run(s) from the history"
    assert ids(cli, on) == {"w-old", "e-new"}
    assert stopped(owner)[0] == 0


def test_serve_without_retention_keeps_every_closed_run(cli, on, aged, spawn):
    owner = spawn("serve", *on)
    assert event(owner, "serving")["retention_s"] is None
    assert ids(cli, on) == ALL
    code, rest = stopped(owner)
    assert code == 0
    assert "retention" not in rest


# -- bad durations ------------------------------------------------------------------

GOOD = [
    ("30d", 30 * DAY_S),
    ("12h", 12 * 3600),
    ("90m", 90 * 60),
    ("45s", 45),
    ("2w", 2 * WEEK_S),
    ("3600", 3600),
    ("0", 0),
    ("5200w", 5200 * WEEK_S),
]
BAD = ["soon", "", "7 d", " 7d", "-1d", "1.5h", "7D", "1y", "d", "7dd", "1e3", "١٢"]


@pytest.mark.parametrize(("text", "seconds"), GOOD)
def test_the_duration_forms(text, seconds):
    assert duration(text, "--older-than", zero=True) == seconds


@pytest.mark.parametrize("text", BAD)
def test_prune_refuses_a_bad_duration_with_the_forms_it_takes(cli, on, home, bad_input, text):
    r = cli("prune", f"--older-than={text}", *on)

    line = bad_input(r, 2, f"--older-than {FORMS}, not {text!r}")
    assert line.startswith("error: ")
    assert not home.exists()


def test_prune_refuses_a_duration_over_a_hundred_years(cli, on, bad_input):
    r = cli("prune", "--older-than", "5201w", *on)
    bad_input(r, 2, "--older-than takes at most 5200w (100 years), not '5201w'")
    r = cli("prune", "--older-than", "9" * 5000, *on)
    bad_input(r, 2, "--older-than takes at most 5200w (100 years)")


def test_prune_needs_older_than(cli, on):
    r = cli("prune", *on)
    assert r.exit_code == 2, r.output
    assert "Missing option '--older-than'" in r.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [("soon", f"--retention {FORMS}, not 'soon'"), ("0", "more than zero, not '0'")],
)
def test_serve_refuses_a_bad_retention_before_opening_the_home(
    cli, on, home, bad_input, text, message
):
    r = cli("serve", "--retention", text, *on)

    bad_input(r, 2, message)
    assert not home.exists()


def test_zero_is_refused_where_it_is_not_taken():
    with pytest.raises(CliError) as e:
        duration("0s", "--retention")
    assert e.value.message == "--retention takes a duration of more than zero, not '0s'"
