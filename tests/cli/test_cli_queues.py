"""Flow control from the command line: `fusee queues [NAME --concurrency N --per-key K]`
lists the queues of runs or sets one's sizes, durably, through the home's owner when
one serves it, else on the home opened here; `fusee start --queue/--debounce/--throttle`
starts a run that waits its turn, joins a burst, or waits for a slot; `list --status
queued` and `describe` say where a queued run stands."""

from __future__ import annotations

import json

import pytest
from test_cli_prune import served, stopped

from fusee_runtime.store.shards import shard_of
from fusee_runtime.store.shared import open_shared


def rows(cli, on) -> list[dict]:
    r = cli("queues", "--json", *on)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def queue(name: str, **sizes) -> dict:
    """A queue's row as `fusee queues --json` prints it."""
    row = {"name": name, "concurrency": 1, "per_key": None, "running": 0, "queued": 0}
    return {**row, "keys": 0, "set": False, **sizes}


def started(cli, on, *args: str) -> str:
    """Starts a run, detached; its id as printed."""
    r = cli("start", *args, "--detach", *on)
    assert r.exit_code == 0, r.output
    return r.stdout.strip()


def test_a_queue_set_with_no_owner_is_recorded_and_an_option_left_out_keeps_its_size(cli, on, home):
    r = cli("queues", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, "no queues set or in use"), r.output
    assert not home.exists()  # nothing recorded: no home made to say so

    r = cli("queues", "cli.q", "--per-key", "1", *on)
    assert (r.exit_code, r.stderr) == (0, "queue cli.q: concurrency 1, per key 1\n"), r.output
    r = cli("queues", "cli.q", "--concurrency", "none", *on)
    assert (r.exit_code, r.stderr) == (0, "queue cli.q: concurrency any, per key 1\n"), r.output
    assert rows(cli, on) == [queue("cli.q", concurrency=None, per_key=1, set=True)]
    r = cli("queues", "cli.q", "--concurrency", "4", "--per-key", "NONE", "--json", *on)
    assert json.loads(r.stdout) == queue("cli.q", concurrency=4, set=True)
    table = cli("queues", *on).stdout.splitlines()
    assert table[0].split() == ["queue", "concurrency", "per", "key", "running", "queued", "keys"]
    assert table[1].split() == ["cli.q", "4", "any", "0", "0", "0"]


def test_bad_input_is_one_line_and_records_nothing(cli, on, home, journal, bad_input):
    assert cli("queues", "cli.q", "--concurrency", "2", *on).exit_code == 0
    before = journal(home)
    for args, said in [
        (("queues", "cli.q"), "error: fusee queues cli.q needs --concurrency or --per-key"),
        (("queues", "--concurrency", "2"), "--concurrency and --per-key set a queue: NAME too"),
        (("queues", "cli.q", "--per-key", "two"), "--per-key takes a whole number or none"),
        (("queues", "cli.q", "--concurrency", "-1"), "--concurrency takes a whole number or none"),
        (
            ("queues", "cli.q", "--concurrency", "1000001"),
            "error: queue 'cli.q': concurrency is None or a whole number from 0 to 1000000",
        ),
        (("start", "cli_echo", "--throttle", "10"), "--throttle takes N/SECONDS (10/60"),
        (("start", "cli_echo", "--throttle", "a/b"), "--throttle takes N/SECONDS"),
        (("start", "cli_echo", "--throttle-key", "k"), "--throttle-key goes with --throttle"),
        (("start", "cli_echo", "--throttle", "0/60"), "error: throttle: n is a whole number"),
        (("start", "cli_echo", "--throttle", "1/0"), "error: throttle: per is a positive"),
        (("start", "cli_echo", "--queue-key", "k"), "queue_key and priority go with a queue"),
        (("start", "cli_echo", "--priority", "2"), "queue_key and priority go with a queue"),
        (("start", "cli_echo", "--debounce", "0"), "debounce is a positive duration"),
        (("start", "cli_echo", "--debounce-key", "k"), "debounce_key and debounce_max go with"),
        (
            ("start", "cli_echo", "--debounce", "5", "--throttle", "1/5"),
            "debounce goes with no update, start_delay, start_at or throttle",
        ),
    ]:
        bad_input(cli(*args, "--id", "x", *on) if args[0] == "start" else cli(*args, *on), 2, said)
    assert journal(home) == before


def test_a_queued_run_is_listed_and_described_with_its_place(cli, on):
    assert cli("queues", "cli.q", "--concurrency", "0", *on).exit_code == 0  # lets none in
    for id, priority in (("q-1", "0"), ("q-2", "3")):
        args = ("--queue", "cli.q", "--queue-key", "acme", "--priority", priority)
        assert started(cli, on, "cli_echo", "--input", "1", "--id", id, *args) == id

    r = cli("list", "--status", "queued", "--json", *on)
    assert [run["id"] for run in json.loads(r.stdout)] == ["q-2", "q-1"], r.output
    r = cli("describe", "q-1", *on)
    assert "its turn in queue 'cli.q', 2nd of 2 in key 'acme' (fusee queues)" in r.stdout
    (shown,) = json.loads(cli("describe", "q-2", "--json", *on).stdout)["waiting"]
    assert shown == {
        "kind": "queue",
        "name": "cli.q",
        "until": None,
        "detail": "1st of 2 in key 'acme'",
    }
    assert rows(cli, on) == [queue("cli.q", concurrency=0, queued=2, keys=1, set=True)]


def test_the_owner_lets_a_queued_run_in_once_its_queue_grows(cli, on, spawn):
    assert cli("queues", "cli.q", "--concurrency", "0", *on).exit_code == 0
    owner = served(spawn, *on)
    assert (
        started(cli, on, "cli_echo", "--input", '"in"', "--id", "o-1", "--queue", "cli.q") == "o-1"
    )
    r = cli("describe", "o-1", *on)
    assert "its turn in queue 'cli.q', 1st of 1 (fusee queues)" in r.stdout, r.output

    r = cli("queues", "cli.q", "--concurrency", "1", *on)
    assert r.stderr == f"queue cli.q: concurrency 1, per key any (by its owner, pid {owner.pid})\n"
    r = cli("result", "o-1", "--wait", *on)
    assert (r.exit_code, r.stdout.strip()) == (0, '"in"'), r.output
    assert rows(cli, on) == [queue("cli.q", set=True)]
    assert stopped(owner)[0] == 0


def test_a_debounced_start_joins_its_burst_s_run(cli, on):
    flow = ("--debounce", "3600", "--debounce-key", "doc-7", "--debounce-max", "7200")
    assert started(cli, on, "cli_echo", "--input", "1", "--id", "d-1", *flow) == "d-1"
    r = cli("start", "cli_echo", "--input", "2", "--id", "d-2", *flow, "--detach", *on)
    assert (r.exit_code, r.stdout) == (0, "d-1\n"), r.output  # the burst's run
    assert r.stderr.startswith("joined the debounced run d-1 (cli_echo, run "), r.stderr
    listed = json.loads(cli("list", "--json", *on).stdout)
    assert [(run["id"], run["status"]) for run in listed] == [("d-1", "scheduled")]


def test_a_throttled_start_past_its_window_waits_for_the_next_slot(cli, on):
    flow = ("--throttle", "1/3600", "--throttle-key", "acme")
    assert started(cli, on, "cli_echo", "--input", "1", "--id", "t-1", *flow) == "t-1"
    assert started(cli, on, "cli_echo", "--input", "2", "--id", "t-2", *flow) == "t-2"
    assert (
        started(
            cli, on, "cli_echo", "--id", "t-3", "--throttle", "1/3600.5", "--throttle-key", "globex"
        )
        == "t-3"
    )
    statuses = {run["id"]: run["status"] for run in json.loads(cli("list", "--json", *on).stdout)}
    assert statuses["t-2"] == "scheduled"  # delayed, not dropped
    assert "scheduled" not in (statuses["t-1"], statuses["t-3"])
    assert "its delayed start, at " in cli("describe", "t-2", *on).stdout


@pytest.mark.xdist_group("postgres-cli-queues")
def test_a_database_of_two_journals_sets_a_queue_on_each_and_adds_its_runs_up(cli, home, pg_url):
    """A queue is its journal's: set through the router on every journal alike, and
    listed as one row whose runs and keys are each journal's added up."""
    open_shared(pg_url).layout(2)  # as `fusee serve --shards 2` lays a new database out
    ids = {}
    for n in range(100):  # an id of each journal
        ids.setdefault(shard_of(f"run-{n}", 2), f"run-{n}")
    assert sorted(ids) == [0, 1]
    on = ["--store", pg_url, "--home", str(home), "--app", "fusee_cli_testapp"]

    r = cli("queues", "cli.q", "--concurrency", "0", "--json", *on)
    assert json.loads(r.stdout) == queue("cli.q", concurrency=0, set=True), r.output
    for shard, id in sorted(ids.items()):
        flow = ("--queue", "cli.q", "--queue-key", f"key-{shard}")
        assert started(cli, on, "cli_echo", "--input", "1", "--id", id, *flow) == id
    assert rows(cli, on) == [queue("cli.q", concurrency=0, queued=2, keys=2, set=True)]
    r = cli("queues", "cli.q", "--per-key", "1", "--json", *on)
    assert json.loads(r.stdout) == queue(
        "cli.q", concurrency=0, per_key=1, queued=2, keys=2, set=True
    )
