"""`fusee objects list|get|describe|call` (issue 39, item 1): a key's handlers called from the
command line, exactly once per call id, its state printed, its keys listed; bad input
is one line and an exit code."""

from __future__ import annotations

import json


def test_calls_reach_a_key_and_its_state_and_keys_show(cli, on, home):
    r = cli("objects", "call", "cli.tally", "k1", "add", "3", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, "3"), r.output
    r = cli("objects", "call", "cli.tally", "k1", "add", "2", "--call-id", "c-1", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, "5"), r.output
    r = cli("objects", "call", "cli.tally", "k1", "add", "2", "--call-id", "c-1", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, "5"), r.output  # sent again: once
    r = cli("objects", "call", "cli.tally", "k1", "total", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, "5"), r.output
    r = cli("objects", "get", "cli.tally", "k1", "--json", *on)
    assert (r.exit_code, json.loads(r.stdout)) == (0, {"count": 5}), r.output
    r = cli("objects", "describe", "cli.tally", "k1", "--json", *on)
    doc = json.loads(r.stdout)
    assert (doc["state"], doc["queue"], doc["applied"]) == ({"count": 5}, [], 2), r.output
    r = cli("objects", "describe", "cli.tally", "k1", *on)
    assert r.exit_code == 0 and 'state: {"count":5}' in r.stdout and "queue: empty" in r.stdout
    cli("objects", "call", "cli.tally", "k2", "add", "1", *on)
    r = cli("objects", "list", "cli.tally", "--json", *on)
    assert r.exit_code == 0, r.output
    assert sorted(row["key"] for row in json.loads(r.stdout)) == ["k1", "k2"]


def test_bad_input_is_one_line_with_its_exit_code(cli, on, home):
    cases = [
        (("objects", "poke"), 2, "takes list, get, describe or call, not 'poke'"),
        (("objects", "get", "nope", "k"), 3, "no object 'nope' in fusee_cli_testapp"),
        (("objects", "call", "cli.tally", "k"), 2, "fusee objects call takes NAME KEY HANDLER"),
        (("objects", "call", "cli.tally", "k", "pay"), 3, "has no handler 'pay'"),
        (("objects", "get", "cli.tally", "never"), 3, "no run with id 'object:cli.tally:never'"),
        (("objects", "describe", "cli.tally"), 2, "fusee objects describe takes NAME KEY"),
    ]
    for args, code, said in cases:
        r = cli(*args, *on)
        assert r.exit_code == code, (args, r.output)
        assert said in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
