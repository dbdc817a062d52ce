"""`fusee tail-stream` follows a run on past its driver's death, and says when a stream
name is one the run does not have (issue 42, items 1 and 2).

Real `fusee` processes on a real home (and on a real PostgreSQL server): the driver
is a `fusee start` of `cli_stream` (it streams 1, waits for signal `more`, streams its
value, closes the stream), killed with SIGKILL or stopped with SIGTERM while a
`tail-stream` follows it. The follower takes the run over (or follows it to whoever
drives it next), prints each item once, and ends when the stream closes. The tests
read the processes' lines; none waits on the clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime.engine.home import HomeLock

Spawn = Callable[..., subprocess.Popen[str]]


def _driver(spawn: Spawn, on: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """`fusee start cli_stream --id s-1`, once it drives the run parked on its signal."""
    driver = spawn("start", "cli_stream", "--id", "s-1", *on, **env)
    assert driver.stderr is not None
    assert driver.stderr.readline().startswith("started s-1")
    assert driver.stderr.readline() == "s-1: waiting for signal 'more'\n"
    return driver


@pytest.fixture(params=["local", "postgresql"])
def store(request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment of every command: a local home, or `FUSEE_STORE` a database."""
    if request.param == "local":
        return {}
    return {"FUSEE_STORE": request.getfixturevalue("pg_url")}


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_tail_stream_follows_the_run_on_when_its_driver_goes_away(
    spawn: Spawn, fusee: Callable[..., Any], on: list[str], store: dict[str, str], how: int
) -> None:
    driver = _driver(spawn, on, store)
    follower = spawn("tail-stream", "s-1", "items", "--json", *on, **store)
    assert follower.stdout is not None and follower.stderr is not None
    assert json.loads(follower.stdout.readline()) == {"index": 0, "item": 1}

    driver.send_signal(how)
    driver.communicate()
    who = (
        f"the worker that drove the journal (pid {driver.pid})"
        if store
        else f"the process that owned the home (pid {driver.pid})"
    )
    assert follower.stderr.readline() == f"{who} went away; following s-1 on\n"
    sent = fusee("signal", "s-1", "more", '"two"', *on, **store)
    assert sent.returncode == 0, sent.stderr

    rest, err = follower.communicate()
    assert follower.returncode == 0, err
    # The item printed before the takeover is not printed again; the one after is.
    assert [json.loads(line) for line in rest.splitlines()] == [{"index": 1, "item": "two"}]
    assert "error" not in err


# -- a stream name the run does not have ---------------------------------------------------


def test_a_closed_run_s_misspelled_stream_exits_3_naming_its_streams(
    fusee: Callable[..., Any], tmp_path: Path
) -> None:
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    assert fusee("start", "digest", "--id", "dg-1", *on).returncode == 0

    for follow in ([], ["--no-follow"]):
        done = fusee("tail-stream", "dg-1", "entires", *follow, *on)

        assert done.returncode == 3, done.stderr
        assert done.stdout == ""
        assert done.stderr == "error: run dg-1 has no stream 'entires' (its streams: 'entries')\n"


def test_an_open_run_s_missing_stream_is_said_then_waited_for_until_the_run_closes(
    spawn: Spawn, fusee: Callable[..., Any], on: list[str]
) -> None:
    # The run's code may still write a stream of any name while it is open: the follower
    # says which it has and waits; once the run closes without it, it exits 3.
    driver = _driver(spawn, on, {})
    follower = spawn("tail-stream", "s-1", "itemz", *on)
    assert follower.stderr is not None
    assert follower.stderr.readline() == (
        "run s-1 has no stream 'itemz' yet (its streams: 'items'); "
        "waiting for its code to write one, Ctrl-C to stop\n"
    )
    assert fusee("signal", "s-1", "more", "2", *on).returncode == 0

    out, err = follower.communicate()
    assert (follower.returncode, out) == (3, "")
    assert err == "error: run s-1 has no stream 'itemz' (its streams: 'items')\n"
    assert driver.wait() == 0


def test_a_stream_the_open_run_has_is_followed_without_a_word(
    spawn: Spawn, fusee: Callable[..., Any], on: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = _driver(spawn, on, {})
    follower = spawn("tail-stream", "s-1", "items", *on)
    assert follower.stdout is not None
    assert follower.stdout.readline() == "1\n"
    # (Past NOTICE_AFTER_S the follower looks at the run's streams: it has this one.)
    assert fusee("signal", "s-1", "more", "2", *on).returncode == 0

    out, err = follower.communicate()
    assert (follower.returncode, out, err) == (0, "2\n", "")
    assert driver.wait() == 0


# -- a server that starts takes the home from a follower ------------------------------------


@pytest.mark.parametrize("follower_is", ["tail-stream", "start"])
def test_a_server_that_starts_takes_the_home_from_a_follower_which_follows_on(
    spawn: Spawn, fusee: Callable[..., Any], on: list[str], follower_is: str
) -> None:
    # (Found by a new user: a follower that had taken the home over when the server died
    # kept the restarted server out: "home is locked by process N".)
    if follower_is == "tail-stream":
        assert fusee("start", "cli_stream", "--id", "s-1", "--detach", *on).returncode == 0
        follower = spawn("tail-stream", "s-1", "items", "--json", *on)  # drives it here
        assert follower.stdout is not None and follower.stderr is not None
        assert json.loads(follower.stdout.readline()) == {"index": 0, "item": 1}
    else:
        follower = _driver(spawn, on, {})
        assert follower.stdout is not None and follower.stderr is not None

    server = spawn("serve", *on)
    assert server.stdout is not None
    serving = json.loads(server.stdout.readline())
    assert (serving["event"], serving["pid"]) == ("serving", server.pid)
    assert follower.stderr.readline() == (
        f"gave the home to the server that asked for it (pid {server.pid}); following s-1 on\n"
    )
    sent = fusee("signal", "s-1", "more", '"two"', *on)
    assert f"(pid {server.pid})" in sent.stderr  # the server drives the run now

    out, err = follower.communicate()
    assert follower.returncode == 0, err
    if follower_is == "tail-stream":
        assert [json.loads(line) for line in out.splitlines()] == [{"index": 1, "item": "two"}]
    else:
        assert json.loads(out) == 2  # the run's result, through the server
    server.send_signal(signal.SIGTERM)
    server.communicate()
    assert server.returncode == 0


def test_a_server_does_not_take_the_home_from_another_server(
    spawn: Spawn, fusee: Callable[..., Any], on: list[str]
) -> None:
    first = spawn("serve", *on)
    assert first.stdout is not None
    assert json.loads(first.stdout.readline())["event"] == "serving"

    second = fusee("serve", *on)

    assert second.returncode == 2
    assert second.stderr.startswith(f"error: home {on[1]} is locked by process {first.pid} (")
    first.send_signal(signal.SIGTERM)
    first.communicate()
    assert first.returncode == 0


def test_a_server_waits_for_a_holder_that_serves_no_socket_to_let_go(
    spawn: Spawn, on: list[str], home: Path
) -> None:
    # A command holding the home for a moment (or an owner still opening it): the server
    # waits for it, as other commands do, instead of failing at once.
    home.mkdir(mode=0o700)
    lock = HomeLock(home)
    lock.acquire()
    try:
        server = spawn("serve", *on)
        assert server.stdout is not None and server.stderr is not None
        said = server.stderr.readline()
        assert said.startswith(f"waiting for process {os.getpid()}"), said
        assert said.endswith(f"to let go of {home}\n"), said
    finally:
        lock.release()
    assert json.loads(server.stdout.readline())["event"] == "serving"
    server.send_signal(signal.SIGTERM)
    server.communicate()
    assert server.returncode == 0
