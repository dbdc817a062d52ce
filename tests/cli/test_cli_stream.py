"""`fusee tail-stream`: a run's stream as JSON lines, from its owner or driven here."""

from __future__ import annotations

import asyncio
import json

import pytest

from fusee_runtime import Status

DIGEST = [
    {"feed": "engineering", "n": 1, "title": "journal v2 merged"},
    {"feed": "engineering", "n": 3, "title": "crash tests doubled"},
    {"feed": "product", "n": 1, "title": "streams shipped"},
    {"feed": "product", "n": 2, "title": "pricing page draft"},
    {"feed": "support", "n": 2, "title": "customer asks for tail-stream"},
]


def _lines(text: str) -> list[object]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("follow", [[], ["--no-follow"]])
def test_the_items_of_a_finished_run(cli, tmp_path, follow):
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    assert cli("start", "digest", "--id", "dg-1", *on).exit_code == 0

    r = cli("tail-stream", "dg-1", "entries", *follow, *on)

    assert r.exit_code == 0, r.output
    assert _lines(r.stdout) == DIGEST
    assert r.stderr == ""


def test_following_with_no_owner_runs_the_run_here(cli, tmp_path):
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    assert cli("start", "digest", "--id", "dg-1", "--detach", *on).exit_code == 0

    r = cli("tail-stream", "dg-1", "entries", *on)

    assert r.exit_code == 0, r.output
    assert _lines(r.stdout) == DIGEST
    assert json.loads(cli("describe", "dg-1", "--json", *on).stdout)["status"] == "completed"


def test_no_follow_prints_what_is_durable_and_stops(cli, on, make_engine):
    async def park() -> None:
        async with make_engine() as engine:
            await engine.start("cli_stream", None, id="s-1")
            await engine.wait_until(lambda: engine.runs.latest("s-1").status == Status.PARKED)

    asyncio.run(park())

    r = cli("tail-stream", "s-1", "items", "--no-follow", *on)

    assert r.exit_code == 0, r.output
    assert _lines(r.stdout) == [1]


def test_a_stream_never_written_of_a_closed_run_is_not_found(cli, on):
    # (Issue 42, item 2: it printed nothing and exited 0, as a misspelled name did.)
    assert cli("start", "cli_echo", "--id", "e-1", *on).exit_code == 0
    r = cli("tail-stream", "e-1", "nothing", *on)
    assert (r.exit_code, r.stdout) == (3, "")
    assert r.stderr == "error: run e-1 has no stream 'nothing' (it has written none)\n"


def test_a_follower_in_another_process_gets_items_from_the_owner(spawn, fusee, on):
    owner = spawn("start", "cli_stream", "--id", "s-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started s-1")
    assert owner.stderr.readline() == "s-1: waiting for signal 'more'\n"
    follower = spawn("tail-stream", "s-1", "items", *on)
    assert follower.stdout is not None

    assert follower.stdout.readline() == "1\n"
    fusee("signal", "s-1", "more", '{"two": 2}', *on)

    rest, err = follower.communicate()
    assert follower.returncode == 0, err
    assert _lines(rest) == [{"two": 2}]
    owner.communicate()
    assert owner.returncode == 0


def test_an_unknown_id_exits_3(cli, on, bad_input):
    assert cli("start", "cli_echo", "--id", "e-1", *on).exit_code == 0
    bad_input(cli("tail-stream", "nope", "items", *on), 3, "no run with id 'nope'")


def test_a_bad_stream_name_exits_2(cli, on, home, bad_input):
    bad_input(cli("tail-stream", "e-1", "", *on), 2, "stream name")
    assert not home.exists()


def test_a_steps_own_stream_is_followed_until_the_step_ends(cli, on):
    words = ["steps", "stream", "too"]
    r = cli("start", "cli_speak", "--input", json.dumps(words), "--id", "sp-1", "--detach", *on)
    assert r.exit_code == 0, r.output

    r = cli("tail-stream", "sp-1", "words", *on)  # no owner: the run is driven here

    assert r.exit_code == 0, r.output
    assert _lines(r.stdout) == words
