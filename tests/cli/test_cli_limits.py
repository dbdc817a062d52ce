"""`fusee limits [NAME PERMITS]`: lists the named limits, or sets one's size, durably,
through the home's owner when one serves it, else on the home opened here."""

from __future__ import annotations

import json

from test_cli_prune import served, stopped


def rows(cli, on) -> list[dict]:
    r = cli("limits", "--json", *on)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_limit_set_with_no_owner_is_recorded(cli, on, home):
    r = cli("limits", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, "no limits set or in use"), r.output
    assert not home.exists()  # nothing recorded: no home made to say so

    r = cli("limits", "cli.api", "3", *on)
    assert r.exit_code == 0, r.output
    assert r.stderr == "limit cli.api: 3 permits\n"
    assert rows(cli, on) == [
        {
            "name": "cli.api",
            "permits": 3,
            "set": True,
            "in_use": 0,
            "waiting": 0,
            "max_in_use": 0,
            "granted": {},
        }
    ]
    table = cli("limits", *on).stdout.splitlines()
    assert table[0].split() == ["limit", "permits", "in", "use", "waiting"]
    assert table[1].split() == ["cli.api", "3", "0", "0"]


def test_a_rate_set_with_no_owner_is_recorded_and_listed(cli, on, home, journal):
    r = cli("limits", "cli.stripe", "100", "--per", "60", *on)
    assert (r.exit_code, r.stderr) == (0, "rate cli.stripe: 100 per 60 s\n"), r.output
    (row,) = rows(cli, on)
    assert (row["name"], row["permits"], row["per_s"], row["set"]) == (
        "cli.stripe",
        100,
        60.0,
        True,
    )
    table = cli("limits", *on).stdout.splitlines()
    assert table[1].split() == ["cli.stripe", "100", "per", "60", "s", "(rate)", "0", "taken", "0"]
    before = journal(home)
    for args, said in [
        (("cli.stripe", "0", "--per", "1"), "permits is a whole number from 1"),
        (("--per", "1"), "fusee limits --per SECONDS sets a rate: NAME PERMITS too"),
    ]:
        r = cli("limits", *args, *on)
        assert r.exit_code == 2 and said in r.stderr and r.stderr.count("\n") == 1, r.output
    assert journal(home) == before


def test_bad_input_is_one_line_and_records_nothing(cli, on, home, journal):
    assert cli("limits", "cli.api", "1", *on).exit_code == 0
    before = journal(home)
    for args, said in [
        (("cli.api",), "error: fusee limits cli.api needs PERMITS, the limit's size\n"),
        (("a/b", "1"), "error: a limit name may not contain '/': 'a/b'\n"),
        (
            ("cli.api", "1000001"),
            "error: limit 'cli.api': permits is a whole number from 0 to 1000000, not 1000001\n",
        ),
    ]:
        r = cli("limits", *args, *on)
        assert (r.exit_code, r.stderr) == (2, said), r.output
    assert journal(home) == before


def test_the_owner_lets_a_waiting_step_in_once_its_limit_grows(cli, on, spawn):
    assert cli("limits", "cli.api", "0", *on).exit_code == 0  # lets none in
    owner = served(spawn, *on)
    r = cli("start", "cli_limited", "--input", '"paid"', "--id", "l-1", "--detach", *on)
    assert r.exit_code == 0, r.output
    for _ in range(200):  # asked again until the owner's run has come to its step
        if [(x["name"], x["waiting"]) for x in rows(cli, on)] == [("cli.api", 1)]:
            break
    else:
        raise AssertionError("the run never waited for a permit")
    described = cli("describe", "l-1", *on)
    assert "a permit of limit 'cli.api' for step 'limited' (fusee limits)" in described.stdout

    r = cli("limits", "cli.api", "1", *on)
    assert r.exit_code == 0, r.output
    assert r.stderr == f"limit cli.api: 1 permits (by its owner, pid {owner.pid})\n"
    r = cli("result", "l-1", "--wait", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, '"paid"'), r.output
    (limit,) = rows(cli, on)
    assert (limit["in_use"], limit["waiting"], limit["granted"]) == (0, 0, {"": 1})
    assert stopped(owner)[0] == 0
