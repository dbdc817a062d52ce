"""The commands on a home whose `history.db` is damaged, or whose `LOCK` or `secret` is
not a file (issue 16, item 1).

What needs the closed runs the store holds exits 2 with one line naming the
file and what to do; what does not (the open runs, which live in the
journal) works; `fusee serve` serves; `fusee check` names every case.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from damage import DAMAGES, flip_page_2

from fusee_runtime import Completion, Ctx, workflow
from fusee_runtime.store import history_db as history

TOKENS: list[str] = []


def _send(completion: Completion) -> None:
    TOKENS.append(completion.token)


@workflow
async def cli_dh_approve(ctx: Ctx, _: Any) -> Any:
    return await ctx.await_completion("review", _send)


def fill(make_engine: Any, testapp: Any, approval: bool = True) -> str | None:
    """e-0 and e-1 closed (in the store), w-1 open (waiting for "go"), and, with
    `approval`, a-1 waiting for its completion; returns a-1's token."""
    TOKENS.clear()

    async def run() -> None:
        async with make_engine() as engine:
            for i in range(2):
                assert await (await engine.start("cli_echo", i, id=f"e-{i}")).result() == i
            await engine.start("cli_wait", None, id="w-1")
            if approval:
                await engine.start("cli_dh_approve", None, id="a-1")
                await engine.wait_until(lambda: bool(TOKENS))
            await engine.wait_until(lambda: engine.runs.newest["w-1"].live.parked)

    asyncio.run(run())
    return TOKENS[-1] if approval else None


def one_line(r: Any, code: int) -> str:
    """The single error line of a command that exited `code`, with no traceback."""
    assert r.exit_code == code, (r.output, r.exception)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    [line] = r.stderr.splitlines()
    assert line.startswith("error: ")
    return line


@pytest.fixture(params=DAMAGES, ids=lambda d: d.__name__)
def damage(request: pytest.FixtureRequest) -> Callable[[Path], None]:
    return request.param


NEED_CLOSED_RUNS = [
    ["list"],
    ["list", "--status", "completed"],
    ["describe", "e-0"],
    ["history", "e-0"],
    ["result", "e-0"],
    ["result", "e-1", "--wait"],
    ["signal", "e-0", "go", "1"],
    ["start", "cli_echo", "--id", "e-0", "--detach"],
    ["prune", "--older-than", "0"],
]
ASK_THE_STORE = [
    # An id not in memory may have closed runs in the store: starting it could run it
    # twice. (`fusee start` with no --id makes an id up here and asks the same.)
    ["start", "cli_echo", "--id", "new-1", "--detach"],
    # Earlier runs of an id in memory may be in the store.
    ["history", "w-1"],
]
"""Commands that ask the store about an id it does not hold: refused when it cannot be
read, answered (from its index) when only the table's root page is damaged."""


def test_what_needs_closed_runs_exits_2_naming_the_store(
    cli, on, home, make_engine, testapp, damage
) -> None:
    fill(make_engine, testapp)
    store = home / history.NAME
    damage(store)
    answers = damage is flip_page_2
    for args in NEED_CLOSED_RUNS + ([] if answers else ASK_THE_STORE):
        line = one_line(cli(*args, *on), 2)
        assert line.startswith(f"error: the history store {store} cannot be read ("), args
        assert "open runs go on" in line and "the next open starts an empty store" in line
    for args in ASK_THE_STORE if answers else []:
        r = cli(*args, *on)
        assert r.exit_code == 0, r.output


def test_what_does_not_need_closed_runs_works(cli, on, home, make_engine, testapp, damage) -> None:
    token = fill(make_engine, testapp)
    assert token is not None
    damage(home / history.NAME)

    r = cli("describe", "w-1", "--json", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "parked"
    r = cli("list", "--status", "parked", "--json", *on)
    assert r.exit_code == 0, r.output
    assert {run["id"] for run in json.loads(r.stdout)} == {"w-1", "a-1"}
    r = cli("signal", "w-1", "go", "5", *on)
    assert r.exit_code == 0, r.output
    r = cli("complete", token, '"yes"', *on)
    assert r.exit_code == 0, r.output
    r = cli("start", "cli_wait", "--id", "w-1", *on)
    assert r.exit_code == 0, r.output  # the id is in memory: its open run answers
    assert json.loads(r.stdout) == 5
    r = cli("result", "a-1", "--wait", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == "yes"


def test_serve_serves_a_home_whose_store_is_damaged(
    spawn, fusee, on, home, make_engine, testapp, damage
) -> None:
    fill(make_engine, testapp, approval=False)
    store = home / history.NAME
    damage(store)
    server = spawn("serve", "--retention", "30d", *on)  # retention prunes on start
    assert server.stdout is not None
    events = []
    for raw in server.stdout:
        events.append(json.loads(raw))
        if events[-1]["event"] == "serving":
            break
    assert events[-1]["runs_open"] == 1

    signalled = fusee("signal", "w-1", "go", "8", *on)
    assert signalled.returncode == 0, signalled.stderr
    waited = fusee("result", "w-1", "--wait", *on)
    assert (waited.returncode, waited.stdout.strip()) == (0, "8"), waited.stderr
    listed = fusee("list", *on)
    assert listed.returncode != 0
    assert "Traceback" not in listed.stderr
    [line] = listed.stderr.splitlines()
    assert line.startswith(f"error: the history store {store} cannot be read (")

    server.send_signal(2)
    out, _ = server.communicate()
    assert server.returncode == 0
    events += [json.loads(raw) for raw in out.splitlines()]
    # Said once, when found: on open, or (a damaged page) by the first read of it.
    [said] = [e for e in events if e["event"] == "log" and "history store" in e["message"]]
    assert said["level"] == "error"
    assert said["message"].startswith(f"fusee: the history store {store} cannot be read (")
    assert said["message"].endswith("(closed runs stay in memory and in checkpoints meanwhile)")


def test_check_names_each_damage_of_the_store(cli, home, make_engine, testapp, damage) -> None:
    fill(make_engine, testapp, approval=False)
    store = home / history.NAME
    damage(store)
    r = cli("check", "--home", str(home))
    line = one_line(r, 1)
    assert line.startswith(f"error: history store damaged: {store}")
    r = cli("check", "--json", "--home", str(home))
    assert r.exit_code == 1
    [found] = json.loads(r.stdout)["damages"]
    assert (found["kind"], found["file"]) == ("history", str(store))
    if damage.__name__ == "directory":
        assert found["reason"].startswith("it is a directory: the home opens without its store")


@pytest.mark.parametrize("name", ["LOCK", "secret"])
def test_check_names_a_directory_where_a_file_of_the_home_goes(
    cli, on, home, make_engine, testapp, name
) -> None:
    fill(make_engine, testapp)
    path = home / name
    path.unlink()
    path.mkdir()
    line = one_line(cli("check", "--home", str(home)), 1)
    assert line.startswith(f"error: home damaged: {path}: it is a directory: ")
    [found] = json.loads(cli("check", "--json", "--home", str(home)).stdout)["damages"]
    assert found == {"kind": "home", "file": str(path), "offset": None, "reason": found["reason"]}


@pytest.mark.parametrize("broken", ["directory", "short"])
def test_complete_with_a_broken_secret_exits_2_naming_it(
    cli, on, home, make_engine, testapp, broken
) -> None:
    token = fill(make_engine, testapp)
    assert token is not None
    secret = home / "secret"
    secret.unlink()
    if broken == "directory":
        secret.mkdir()
    else:
        secret.write_bytes(b"12345")
    line = one_line(cli("complete", token, '"yes"', *on), 2)
    assert line.startswith(f"error: the home's token secret {secret} cannot be used (")
    reason = "it is a directory" if broken == "directory" else "it holds 5 bytes, not 32"
    assert f"({reason})" in line
    line = one_line(cli("check", "--home", str(home)), 1)
    assert line.startswith(f"error: home damaged: {secret}: {reason}: ")
