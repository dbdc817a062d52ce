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
    bad_input(
        cli("list", "--status", "opened", *on),
        2,
        "statuses: open, scheduled, queued, running, parked",
    )


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


def test_where_finds_the_orders_of_a_customer_over_an_amount(fusee, spawn, tmp_path):
    """`fusee list --where` on the README's order (issue 19): from the home, and
    through a process that owns it."""
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    for n, (customer, cents) in enumerate([("c-7", 1800), ("c-7", 900), ("c-8", 5000)]):
        order = {"id": f"o-{n}", "customer": customer, "sku": "tea", "quantity": 1}
        order |= {"cents": cents, "address": "12 Rue des Lilas"}
        path = tmp_path / f"o-{n}.json"
        path.write_text(json.dumps(order))
        assert fusee("start", "order", "--input", str(path), "--id", f"o-{n}", *on).returncode == 0
    where = ["--where", "customer=c-7", "--where", "cents>1000", "--json"]

    alone = fusee("list", *where, *on)
    assert alone.returncode == 0, alone.stderr
    assert [r["id"] for r in json.loads(alone.stdout)] == ["o-0"]
    assert json.loads(alone.stdout)[0]["attributes"] == {"customer": "c-7", "cents": 1800}
    described = fusee("describe", "o-0", *on)
    # As JSON: the text "c-7", the number 1800 (`--where cents=1800` finds it, not "1800").
    assert 'customer = "c-7"' in described.stdout and "cents = 1800" in described.stdout
    owner = spawn("start", "approval", "--id", "ap-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started ap-1")
    assert owner.stderr.readline().startswith("ap-1: waiting for signal 'approve'")
    through = fusee("list", *where, *on)
    assert through.returncode == 0, through.stderr
    assert json.loads(through.stdout) == json.loads(alone.stdout)
    fewer = fusee("list", "--where", "cents<=1800", "--json", *on)
    assert [r["id"] for r in json.loads(fewer.stdout)] == ["o-1", "o-0"]
    fusee("signal", "ap-1", "approve", "false", *on)
    owner.communicate()


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("customer", "a where condition is KEY=VALUE, or KEY then one of = != < <= > >= then"),
        ("=c-7", "a where condition is KEY=VALUE"),
        ("vip>true", "where: 'vip' > true: true and false take = and != only"),
        ("n>1e999", "where: 'n' > inf: a number must be finite"),
        ("n==5", "a where condition has one operator of = != < <= > >=, not 'n==5'"),
        ("n=>5", 'text that starts with one is quoted: n=">5"'),
    ],
)
def test_a_bad_where_is_one_line_and_exit_2(cli, on, bad_input, expression, message):
    bad_input(cli("list", "--where", expression, *on), 2, message)


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_a_parent_that_names_no_run_exits_3_as_describe_does(cli, on, bad_input, as_json):
    # In a home never opened too: nothing is created to say so.
    line = bad_input(cli("list", "--parent", "nosuch", *as_json, *on), 3)
    assert line == "error: no run with id 'nosuch'"
    r = cli("start", "cli_echo", "--input", "-", "--id", "e-1", *on, input='"x"')
    assert r.exit_code == 0, r.output
    described = bad_input(cli("describe", "nosuch", *as_json, *on), 3)
    assert bad_input(cli("list", "--parent", "nosuch", *as_json, *on), 3) == described == line
    # A run with no children has none to list: that is no error.
    r = cli("list", "--parent", "e-1", *as_json, *on)
    assert r.exit_code == 0, r.output
    assert (r.stdout, r.stderr) == (("[]\n", "") if as_json else ("", "no runs\n"))


def test_a_bad_parent_id_is_a_usage_error(cli, on, bad_input):
    bad_input(cli("list", "--parent", "a/b", *on), 2, "a workflow id may not contain '/'")
