"""Commands from another host: `fusee --store URL` reaches the process that drives the
journal through the database (`control/remote.py`), with no socket between them.

The driver is a real `fusee serve --store URL` child with a home of its own; the
commands run with another home (as on a second host, where the driver's socket
does not exist), against a real PostgreSQL server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from processes import REPO, fusee_script

from fusee_runtime.control import remote

APP = "fusee_cli_testapp"
HERE = Path(__file__).resolve().parent


@pytest.fixture
def driver(tmp_path: Path, pg_url: str) -> Iterator[subprocess.Popen[str]]:
    """`fusee serve --store URL` on its own home, once it says it serves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(REPO), env.get("PYTHONPATH")]))
    command = [fusee_script(), "--store", pg_url, "serve", "--home", str(tmp_path / "driver")]
    with open(tmp_path / "driver.err", "wb") as err:
        proc = subprocess.Popen(
            [*command, "--app", APP],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event: dict[str, Any] = orjson.loads(line)
            if event["event"] == "serving":
                break
        else:
            raise AssertionError((tmp_path / "driver.err").read_text())
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # not an assertion: a stuck child must not hang
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_commands_with_another_home_reach_the_driver_through_the_database(
    cli, tmp_path: Path, pg_url: str, driver: subprocess.Popen[str]
) -> None:
    here = tmp_path / "elsewhere"
    on = ["--store", pg_url, "--home", str(here), "--app", APP]
    r = cli("start", "cli_wait", "--id", "w-1", "--detach", *on)
    assert r.exit_code == 0, r.stderr
    r = cli("describe", "w-1", *on)
    assert r.exit_code == 0, r.stderr
    host = os.uname().nodename
    assert "parked" in r.stdout and f"fusee pid {driver.pid} on {host}" in r.stdout
    r = cli("signal", "w-1", "go", "5", *on)
    assert r.exit_code == 0, r.stderr
    r = cli("result", "w-1", "--wait", *on)  # a watch: events and beats through the database
    assert r.exit_code == 0 and r.stdout.strip() == "5", r.stderr
    r = cli("list", "--json", *on)
    assert [(d["id"], d["status"]) for d in json.loads(r.stdout)] == [("w-1", "completed")]
    assert not here.exists(), "nothing opened the journal here: the driver answered"
    with psycopg.connect(pg_url) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM fusee_requests), (SELECT count(*) FROM fusee_answers)"
        ).fetchone()
    assert left == (0, 0), "each command deleted its request and its answers"


def test_logs_from_another_host_read_and_follow_the_driver_s_lines(
    cli, tmp_path: Path, pg_url: str, driver: subprocess.Popen[str]
) -> None:
    on = ["--store", pg_url, "--home", str(tmp_path / "elsewhere"), "--app", APP]
    r = cli("start", "cli_chatty", "--id", "c-1", "--detach", *on)
    assert r.exit_code == 0, r.stderr
    rest = _followed(cli, "c-1", "5", on)  # written by the driver, read here
    assert [(d["level"], d["msg"]) for d in rest] == [
        ("warn", "got 5"),
        ("info", "run closed: completed"),
    ]
    r = cli("logs", "c-1", *on)
    assert r.exit_code == 0, r.stderr
    assert [line.split("Z ", 1)[1] for line in r.stdout.splitlines()[1:]] == [
        "info  waiting for go",
        "warn  got 5",
        "run closed: completed",
    ]
    assert not (tmp_path / "elsewhere").exists(), "the lines came from the database"


def test_a_follower_whose_run_s_close_line_was_lost_stops_once_the_run_closed(
    cli, tmp_path: Path, pg_url: str, driver: subprocess.Popen[str]
) -> None:
    """The lines are not durable: a close line lost (here the table drops it) must not
    keep `logs -f` following forever."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE RULE lose_closes AS ON INSERT TO fusee_logs "
            "WHERE position('\"event\":\"closed\"' in convert_from(NEW.line, 'UTF8')) > 0 "
            "DO INSTEAD NOTHING"
        )
    on = ["--store", pg_url, "--home", str(tmp_path / "elsewhere"), "--app", APP]
    r = cli("start", "cli_chatty", "--id", "c-2", "--detach", *on)
    assert r.exit_code == 0, r.stderr
    assert [d["msg"] for d in _followed(cli, "c-2", "6", on)] == ["got 6"]


def _followed(cli: Any, id: str, go: str, on: list[str]) -> list[dict[str, Any]]:
    """What `fusee logs ID -f --json`, in a child process, prints of a `cli_chatty` run
    after its first line ("waiting for go"), once the run is signalled `go` and the
    follower stopped by itself (exit 0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(REPO), env.get("PYTHONPATH")]))
    follower = subprocess.Popen(
        [fusee_script(), "logs", id, "-f", "--json", *on],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())
        assert (first["id"], first["msg"]) == (id, "waiting for go")
        r = cli("signal", id, "go", go, *on)
        assert r.exit_code == 0, r.stderr
        out, err = follower.communicate()
    finally:
        if follower.poll() is None:  # a failed assertion above: the follower must not linger
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_with_no_driver_a_command_opens_the_journal_itself(
    cli, tmp_path: Path, pg_url: str
) -> None:
    on = ["--store", pg_url, "--home", str(tmp_path / "h"), "--app", APP]
    r = cli("start", "cli_echo", "--input", "-", "--id", "e-1", *on, input="7")
    assert r.exit_code == 0, r.stderr
    r = cli("describe", "e-1", "--json", *on)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "completed"
    r = cli("start", "cli_wait", "--id", "w-2", "--detach", *on)
    r = cli("describe", "w-2", *on)
    assert r.exit_code == 0 and "driven by" not in r.stdout, "opened by the command itself"


def test_a_request_nobody_takes_is_withdrawn_and_says_so(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal held by a process that does not serve it (an engine opened passively):
    the request is taken back after TAKE_S, nothing was done, and the caller may retry."""
    import asyncio

    from fusee_runtime import Config, Engine
    from fusee_runtime.control.client import OwnerGone
    from fusee_runtime.store import pg_requests
    from fusee_runtime.store.shared import open_shared

    monkeypatch.setattr(pg_requests, "TAKE_S", 0.2)

    async def main() -> None:
        config = Config(store=pg_url, drive=False)
        async with Engine(tmp_path / "h", app=None, config=config):
            journal = open_shared(pg_url)
            assert await remote.StoreClient.reach(journal) is None
            with pytest.raises(OwnerGone, match="no process took the request"):
                await remote.StoreClient(journal).ping()

    asyncio.run(main())
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM fusee_requests").fetchone() == (0,)
