"""`fusee list` as people use it: `--status open`, a default limit that says what it left
out, and `--limit 0` for every run (issue 17, item 4)."""

from __future__ import annotations

import asyncio
import json

import pytest

DEFAULT_LIMIT = 20
"""How many runs `fusee list` shows with no --limit (README, `fusee list --help`)."""
MORE = "there are more: --limit N shows the newest N, --limit 0 shows all"


@pytest.fixture
def many(make_engine, on) -> list[str]:
    """One more completed run than `fusee list` shows by default; their ids, newest first."""
    ids = [f"r-{i:02}" for i in range(DEFAULT_LIMIT + 1)]

    async def fill() -> None:
        async with make_engine() as engine:
            for id in ids:
                assert await (await engine.start("cli_echo", id, id=id)).result() == id

    asyncio.run(fill())
    return ids[::-1]


def listed(r) -> list[str]:
    assert r.exit_code == 0, r.output
    return [run["id"] for run in json.loads(r.stdout)]


def test_status_open_lists_every_run_not_closed(cli, on, make_stuck):
    make_stuck()  # s-1: its code changed under it
    assert cli("result", "s-1", "--wait", *on).exit_code == 1  # now stuck
    for args, code in [
        (["cli_echo", "--id", "e-1"], 0),  # completed
        (["cli_fail", "--input", "-", "--id", "f-1"], 1),  # failed
        (["cli_pause", "--id", "p-1"], 1),  # paused
        (["cli_hang", "--id", "h-1", "--detach"], 0),  # running
        (["cli_wait", "--id", "w-1", "--detach"], 0),  # parked
    ]:
        r = cli("start", *args, *on, input='{"cents": 9}')
        assert r.exit_code == code, r.output
    assert cli("result", "w-1", "--wait", "--timeout", "0.5", *on).exit_code == 4  # parks

    r = cli("list", "--status", "open", "--json", *on)

    got = {(run["id"], run["status"]) for run in json.loads(r.stdout)}
    assert got == {("w-1", "parked"), ("h-1", "running"), ("p-1", "paused"), ("s-1", "stuck")}
    assert listed(r) == ["w-1", "h-1", "p-1", "s-1"]  # newest first
    table = cli("list", "--status", "open", *on)
    assert table.exit_code == 0, table.output
    assert "w-1" in table.stdout and "e-1" not in table.stdout


def test_an_unknown_status_names_open_among_the_statuses(cli, on, bad_input):
    bad_input(cli("list", "--status", "opened", *on), 2, "statuses: open, running, parked")


def test_list_shows_the_newest_20_and_says_there_are_more(cli, on, many):
    r = cli("list", "--json", *on)

    assert listed(r) == many[:DEFAULT_LIMIT]  # stdout stays one JSON array
    assert r.stderr == f"showing the newest {DEFAULT_LIMIT} runs; {MORE}\n"
    table = cli("list", *on)
    assert table.exit_code == 0, table.output
    assert many[0] in table.stdout and many[-1] not in table.stdout
    assert table.stderr.splitlines() == [f"showing the newest {DEFAULT_LIMIT} runs; {MORE}"]


def test_limit_0_lists_every_run_and_says_nothing_more(cli, on, many):
    r = cli("list", "--limit", "0", "--json", *on)
    assert listed(r) == many
    assert r.stderr == ""
    table = cli("list", "--limit", "0", *on)
    assert many[-1] in table.stdout and table.stderr == ""


def test_a_limit_says_there_are_more_only_when_there_are(cli, on, many):
    five = cli("list", "--limit", "5", "--json", *on)
    assert listed(five) == many[:5]
    assert five.stderr == f"showing the newest 5 runs; {MORE}\n"
    every = cli("list", "--limit", str(len(many)), "--json", *on)
    assert listed(every) == many
    assert every.stderr == ""
    by_workflow = cli("list", "--workflow", "cli_echo", "--limit", "0", "--json", *on)
    assert listed(by_workflow) == many


def test_a_negative_limit_is_a_usage_error(cli, on):
    r = cli("list", "--limit", "-1", *on)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert "--limit" in r.stderr
