"""Deep or huge input, and `reset --to` a step the run never called (issue 16, items 5, 12).

A value nested deeper than the CLI takes, through every way a value enters
a command, is one line and exit 2 before any home is opened; a value at
the limit goes through an owner and comes back whole. `list --limit` past
its maximum is one line and exit 2, with and without an owner.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime.engine.engine import LIST_LIMIT_MAX
from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX


def nested(depth: int) -> Any:
    """`depth` arrays within each other around a 1; orjson writes at most 254."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


DEEP = json.dumps(nested(300))
"""Valid JSON (orjson reads 1,024 levels) that orjson cannot write back."""


@pytest.fixture
def deep_file(tmp_path: Path) -> str:
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    return str(path)


# Each way a value enters a command: (arguments, stdin, what the message calls it).
WAYS_IN = {
    "start --input FILE": (["start", "cli_echo", "--input", "FILE"], None, "the input"),
    "start --input -": (["start", "cli_echo", "--input", "-"], DEEP, "the input"),
    "signal --input": (["signal", "w-1", "go", "--input", "FILE"], None, "the signal's value"),
    "signal VALUE": (["signal", "w-1", "go", DEEP], None, "the signal's value"),
    "complete --input": (
        ["complete", "4f1c2b7e", "--input", "FILE"],
        None,
        "the completion's value",
    ),
    "complete VALUE": (["complete", "4f1c2b7e", DEEP], None, "the completion's value"),
    "update ARG": (["update", "w-1", "set", DEEP], None, "the update's argument"),
    "query ARG": (["query", "w-1", "ask", DEEP], None, "the query's argument"),
}


@pytest.mark.parametrize("way", list(WAYS_IN))
def test_a_value_nested_too_deep_is_one_line_and_exit_2(
    cli, on, home, journal, bad_input, deep_file, way
):
    """Before: `TypeError: Recursion limit reached`, a traceback, from orjson.dumps."""
    assert cli("start", "cli_wait", "--id", "w-1", "--detach", *on).exit_code == 0
    before = journal(home)
    args, stdin, what = WAYS_IN[way]
    args = [deep_file if a == "FILE" else a for a in args]

    r = cli(*args, *on, input=stdin)

    bad_input(r, 2, f"{what} is nested 300 levels deep", f"over the limit of {PAYLOAD_DEPTH_MAX}")
    assert journal(home) == before


def test_one_level_past_the_limit_is_refused(cli, on, home, journal, bad_input):
    too_deep = json.dumps({"a": nested(PAYLOAD_DEPTH_MAX)})
    r = cli("start", "cli_echo", "--input", "-", *on, input=too_deep)
    bad_input(r, 2, f"the input is nested {PAYLOAD_DEPTH_MAX + 1} levels deep")
    assert journal(home) is None


def test_a_value_at_the_limit_goes_through_an_owner_and_comes_back(spawn, fusee, on, tmp_path):
    """The limit leaves room for what wraps a value on its way: the control request,
    the watch's events, the journal's records, the history store's rows."""
    at_limit = tmp_path / "at-limit.json"
    at_limit.write_text(json.dumps(nested(PAYLOAD_DEPTH_MAX)))
    owner = spawn("start", "cli_wait", "--id", "w-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started w-1")
    assert owner.stderr.readline().startswith("w-1: waiting for signal 'go'")

    echoed = fusee("start", "cli_echo", "--id", "e-1", "--input", str(at_limit), *on)
    sent = fusee("signal", "w-1", "go", "--input", str(at_limit), *on)

    assert echoed.returncode == 0, echoed.stderr
    assert json.loads(echoed.stdout) == nested(PAYLOAD_DEPTH_MAX)
    assert f"(pid {owner.pid})" in sent.stderr
    out, err = owner.communicate()
    assert owner.returncode == 0, err
    assert json.loads(out) == nested(PAYLOAD_DEPTH_MAX)
    # Read back once the owner has gone, from the journal and the history store.
    history = fusee("history", "w-1", "--json", *on)
    assert history.returncode == 0, history.stderr
    assert json.loads(history.stdout)[-1]["result"] == nested(PAYLOAD_DEPTH_MAX)


@pytest.mark.parametrize("with_owner", [False, True], ids=["no owner", "owner"])
@pytest.mark.parametrize("limit", ["99999999999999999999", str(LIST_LIMIT_MAX + 1)])
def test_a_list_limit_past_the_maximum_is_one_line_and_exit_2(spawn, fusee, on, with_owner, limit):
    """Before: OverflowError from SQLite without an owner; with one, orjson's TypeError
    ("Integer exceeds 64-bit range") sending the request. Both tracebacks."""
    assert fusee("start", "cli_echo", "--id", "e-1", *on).returncode == 0
    if with_owner:
        owner = spawn("start", "cli_wait", "--id", "w-1", *on)
        assert owner.stderr is not None
        assert owner.stderr.readline().startswith("started w-1")

    r = fusee("list", "--limit", limit, *on)

    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == f"error: --limit takes at most {LIST_LIMIT_MAX}, not {limit}\n"


def test_the_largest_list_limit_lists_every_run(fusee, on):
    assert fusee("start", "cli_echo", "--id", "e-1", *on).returncode == 0
    r = fusee("list", "--limit", str(LIST_LIMIT_MAX), "--json", *on)
    assert r.returncode == 0, r.stderr
    assert [run["id"] for run in json.loads(r.stdout)] == ["e-1"]


def test_a_list_limit_too_long_for_int_is_a_usage_error(cli, on):
    r = cli("list", "--limit", "9" * 5000, *on)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert "--limit" in r.stderr


# -- reset --to a step the run never called (item 12) ---------------------------------


@pytest.fixture
def reset_twice(cli, on) -> None:
    """Run r-1 (`cli_pair`: steps first, second) completed, then reset to `second` and
    completed again: the newest run called `second` itself and kept `first` from the
    run it reset."""
    assert cli("start", "cli_pair", "--input", "-", "--id", "r-1", *on, input="7").exit_code == 0
    assert cli("reset", "r-1", "--to", "second", *on).exit_code == 0
    assert cli("result", "r-1", "--wait", *on).exit_code == 0


def test_reset_to_an_unknown_step_lists_the_steps_kept_from_the_run_reset(
    cli, on, home, journal, bad_input, reset_twice
):
    """Before: "its steps: second", though `--to first` works."""
    before = journal(home)
    r = cli("reset", "r-1", "--to", "nosuch", *on)
    bad_input(r, 2, "run 'r-1' has no operation named 'nosuch'; --to takes an operation number")
    assert r.stderr.endswith("or the name of a step (first, second)\n")
    assert journal(home) == before


def listed_steps(cli, on, bad_input) -> list[str]:
    line = bad_input(cli("reset", "r-1", "--to", "nosuch", *on), 2)
    return line.split("the name of a step (")[1].removesuffix(")").split(", ")


def test_the_reset_error_lists_the_steps_to_takes(cli, on, bad_input, reset_twice):
    # A reset of a reset, not driven yet: it has called only what it kept.
    assert cli("reset", "r-1", "--to", "second", *on).exit_code == 0
    assert listed_steps(cli, on, bad_input) == ["first"]
    bad_input(cli("reset", "r-1", "--to", "second", *on), 2, "a step (first)")
    # Driven, it calls `second` again: the chain of resets is followed back for `first`.
    assert cli("result", "r-1", "--wait", *on).exit_code == 0
    assert listed_steps(cli, on, bad_input) == ["first", "second"]
    for name in ["first", "second"]:
        r = cli("reset", "r-1", "--to", name, *on)
        assert r.exit_code == 0, r.output
        assert cli("result", "r-1", "--wait", *on).exit_code == 0
        assert listed_steps(cli, on, bad_input) == ["first", "second"]
