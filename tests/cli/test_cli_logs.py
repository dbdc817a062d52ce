"""`fusee logs`: a run's ctx.log lines, as text or JSON lines, and following them with -f.

On both stores: with `--store`, the lines are in the database (`fusee_logs`), read
by a command with no access to the driver's home.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Ctx, current_ctx, step, workflow

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
T0 = "2023-11-14 22:13:20.000Z"  # the fake clock's start, as `fusee logs` shows it

STORES = ("local", "postgresql")

ENTERED: asyncio.Event | None = None
RELEASE: asyncio.Event | None = None


@step
def logs_cli_greet(name: str) -> str:
    current_ctx().log.info(f"greeting {name}")
    return f"hello {name}"


@step
async def logs_cli_waits() -> None:
    current_ctx().log.info("waiting for the test")
    assert ENTERED is not None and RELEASE is not None
    ENTERED.set()
    await RELEASE.wait()


@workflow(name="logs_cli.greets")
async def greets(ctx: Ctx, name: str) -> str:
    ctx.log.info(f"about to greet {name}")
    greeting = await logs_cli_greet(name)
    ctx.log.warn("greeted")
    return greeting


@workflow(name="logs_cli.quiet")
async def quiet(ctx: Ctx, _: None) -> None:
    await ctx.wait_for("never")


@workflow(name="logs_cli.rounds")
async def rounds(ctx: Ctx, n: int) -> int:
    ctx.log.info(f"round {n}")
    if n == 0:
        await ctx.continue_as_new(1)
    await logs_cli_waits()
    ctx.log.info("released")
    return n


@pytest.fixture
def on(home: Path, store: str | None) -> list[str]:
    """`--home` and `--app` for the test's home and the test app; `--store` for its store."""
    return [
        "--home",
        str(home),
        "--app",
        "fusee_cli_testapp",
        *(["--store", store] if store else []),
    ]


def stored(home: Path, store: str | None, id: str) -> list[dict[str, Any]]:
    """The lines of `id` as the store keeps them: in `<home>/logs`, or in `fusee_logs`."""
    if store is None:
        lines = (home / "logs" / "fusee.log").read_bytes().splitlines()
    else:
        import psycopg

        with psycopg.connect(store) as conn:
            rows = conn.execute("SELECT line FROM fusee_logs ORDER BY seq").fetchall()
        lines = [bytes(line) for (line,) in rows]
    return [doc for doc in map(json.loads, lines) if doc["id"] == id]


def drive(make_engine, *starts: tuple[Any, Any, str]) -> dict[str, str]:
    """Runs each (workflow, input, id) to its end; returns the run id of each id."""

    async def main() -> dict[str, str]:
        async with make_engine() as engine:
            handles = [await engine.start(wf, value, id=wid) for wf, value, wid in starts]
            for h in handles:
                await h.result()
            return {h.id: h.run_id for h in handles}

    return asyncio.run(main())


def test_logs_prints_the_lines_of_a_finished_run(cli, on, make_engine):
    run_id = drive(make_engine, (greets, "ada", "g-1"), (greets, "bob", "g-2"))["g-1"]
    r = cli("logs", "g-1", *on)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        f"── run {run_id} (logs_cli.greets)",
        f"{T0} info  about to greet ada",
        f"{T0} info  logs_cli_greet#1 greeting ada",
        f"{T0} warn  greeted",
        f"{T0} run closed: completed",
    ]


def test_logs_json_prints_the_lines_as_stored_with_iso_instants(
    cli, on, make_engine, home: Path, store: str | None
):
    drive(make_engine, (greets, "ada", "g-1"), (greets, "bob", "g-2"))
    r = cli("logs", "g-2", "--json", *on)
    assert r.exit_code == 0, r.output
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert docs == [{**d, "ts": "2023-11-14T22:13:20+00:00"} for d in stored(home, store, "g-2")]
    assert [d["msg"] for d in docs] == [
        "about to greet bob",
        "greeting bob",
        "greeted",
        "run closed: completed",
    ]
    assert {d["workflow"] for d in docs} == {"logs_cli.greets"}
    assert docs[1]["step"] == "logs_cli_greet"
    assert docs[1]["attempt"] == 1
    assert docs[-1]["event"] == "closed"
    assert docs[-1]["status"] == "completed"


def keep(home: Path, store: str | None, id: str, *docs: dict[str, Any]) -> None:
    """Adds lines of `id` to the store's run log, as an engine would have written them."""
    lines = [json.dumps(doc).encode() for doc in docs]
    if store is None:
        with open(home / "logs" / "fusee.log", "ab") as f:
            f.writelines(line + b"\n" for line in lines)
    else:
        import psycopg

        with psycopg.connect(store) as conn:
            for line in lines:
                conn.execute("INSERT INTO fusee_logs (id, line) VALUES (%s, %s)", (id, line))


def test_lines_written_before_the_workflow_field_are_still_shown(
    cli, on, make_engine, home: Path, store: str | None
):
    drive(make_engine, (greets, "ada", "g-1"))  # the log (file or table) is there
    tags = {"ts": 1700000000, "level": "info", "id": "old-1", "run_id": "r-old"}
    tags |= {"step": None, "attempt": None}
    closed = {"msg": "run closed: completed", "event": "closed", "status": "completed"}
    keep(home, store, "old-1", {**tags, "msg": "logged long ago"}, {**tags, **closed})
    r = cli("logs", "old-1", *on)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "── run r-old",
        f"{T0} info  logged long ago",
        f"{T0} run closed: completed",
    ]
    r = cli("logs", "old-1", "--json", *on)
    assert r.exit_code == 0, r.output
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["msg"] for d in docs] == ["logged long ago", "run closed: completed"]
    assert not any("workflow" in d for d in docs)  # printed as stored


def test_follow_on_a_closed_run_prints_json_lines_and_stops(cli, on, make_engine):
    drive(make_engine, (greets, "ada", "g-1"))
    r = cli("logs", "g-1", "-f", "--json", *on)
    assert r.exit_code == 0, r.output
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d.get("status") for d in docs] == [None, None, None, "completed"]
    assert {d["workflow"] for d in docs} == {"logs_cli.greets"}


def test_an_open_run_without_lines_prints_nothing(cli, on, make_engine):
    async def start_only() -> None:
        async with make_engine() as engine:
            await engine.start(quiet, None, id="q-1")

    asyncio.run(start_only())
    r = cli("logs", "q-1", *on)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert "no log lines for q-1" in r.stderr


@pytest.mark.parametrize("follow", [[], ["-f"]])
def test_an_unknown_id_exits_3_with_one_line(cli, on, make_engine, bad_input, follow):
    r = cli("logs", "nope", *follow, *on)  # no journal at all
    bad_input(r, 3, "no run with id 'nope'")
    drive(make_engine, (greets, "ada", "g-1"))
    r = cli("logs", "nope", *follow, *on)  # a journal and a log, other ids in them
    bad_input(r, 3, "no run with id 'nope'")


# -- following, in a real child process ---------------------------------------------------------


def fusee_command() -> list[str]:
    beside = Path(sys.executable).with_name("fusee")
    found = str(beside) if beside.exists() else shutil.which("fusee")
    if found is None:
        pytest.fail("the `fusee` console script is not installed: pip install -e .")
    return [found]


async def spawn_follower(*args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return await asyncio.create_subprocess_exec(
        *fusee_command(),
        "logs",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_until(proc: asyncio.subprocess.Process, msg: str) -> list[dict[str, Any]]:
    """The follower's lines up to the one whose message is `msg`."""
    assert proc.stdout is not None
    docs: list[dict[str, Any]] = []
    while not docs or docs[-1]["msg"] != msg:
        line = await proc.stdout.readline()
        assert line, "the follower stopped early"
        docs.append(json.loads(line))
    return docs


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """`logs_cli_waits` sets the first event when it runs, and returns once the second is set."""
    entered, release = asyncio.Event(), asyncio.Event()
    monkeypatch.setattr(sys.modules[__name__], "ENTERED", entered)
    monkeypatch.setattr(sys.modules[__name__], "RELEASE", release)
    return entered, release


async def test_follow_prints_lines_as_they_come_and_exits_when_the_run_closes(
    make_engine, on, gate
):
    entered, release = gate
    async with make_engine() as engine:  # this process owns the home: the child only reads
        h = await engine.start(rounds, 0, id="r-1")
        await entered.wait()
        follower = await spawn_follower("r-1", "-f", "--json", *on)
        seen = await read_until(follower, "waiting for the test")
        # The first run continued as new: the follower goes on with its successor.
        # (Which comes first, the first run's durable close or its successor's
        # first line, is up to the group commit.)
        assert sorted(d["msg"] for d in seen) == [
            "round 0",
            "round 1",
            "run closed: continued_as_new",
            "waiting for the test",
        ]
        release.set()  # only now is the rest of the run logged
        assert await h.result() == 1
        out, err = await follower.communicate()
    assert follower.returncode == 0, err
    rest = [json.loads(line) for line in out.decode().splitlines()]
    assert [d["msg"] for d in rest] == ["released", "run closed: completed"]
    assert rest[-1]["event"] == "closed"
    assert rest[-1]["status"] == "completed"
    assert err == b""


async def test_ctrl_c_stops_following_with_exit_130(make_engine, on, gate):
    entered, release = gate
    async with make_engine() as engine:
        await engine.start(rounds, 1, id="r-2")
        await entered.wait()
        follower = await spawn_follower("r-2", "--follow", "--json", *on)
        await read_until(follower, "waiting for the test")
        follower.send_signal(signal.SIGINT)
        out, err = await follower.communicate()
        release.set()
    assert follower.returncode == 130
    assert out == b""
    lines = err.decode().splitlines()
    assert lines == ["stopped following the logs of r-2"]
