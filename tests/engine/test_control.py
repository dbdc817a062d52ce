"""The control API over the owner's socket: the same answers and errors as in process."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from fusee_runtime import (
    Cancelled,
    CodecError,
    Ctx,
    Engine,
    NotFound,
    Rejected,
    Status,
    step,
    workflow,
)
from fusee_runtime.control.api import Control, run_info, run_json
from fusee_runtime.control.client import ControlClient


@step
async def double(x: int) -> int:
    return 2 * x


@workflow
async def ctl_gate(ctx: Ctx, x: int) -> int:
    await ctx.wait_for("go")
    return await double(x)


async def _connect(home: Path) -> ControlClient:
    client = await ControlClient.connect(home)
    assert client is not None, "the engine serves no control socket"
    return client


async def test_no_owner_means_no_client(home: Path, make_engine) -> None:
    assert await ControlClient.connect(home) is None
    async with make_engine(drive=False):
        # A passive open runs nothing, so it serves nothing either.
        assert await ControlClient.connect(home) is None
    async with make_engine(control=False):
        assert await ControlClient.connect(home) is None


async def test_the_socket_is_private_and_removed_on_close(home: Path, make_engine) -> None:
    async with make_engine():
        mode = os.stat(home / "control.sock").st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        assert (await _connect(home)).owner == os.getpid()
    assert not (home / "control.sock").exists()


async def test_a_stale_socket_is_replaced(home: Path, make_engine) -> None:
    home.mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(home / "control.sock"))
    stale.close()  # the file stays; nobody listens: what a SIGKILLed owner leaves
    assert await ControlClient.connect(home) is None
    async with make_engine():
        assert (await _connect(home)).owner == os.getpid()


async def test_every_call_answers_as_it_does_in_process(home: Path, make_engine) -> None:
    async with make_engine() as engine:
        client = await _connect(home)
        local = Control(engine)
        info, existed = await client.start("ctl_gate", 21, id="g-1")
        assert (info.id, info.workflow, existed) == ("g-1", "ctl_gate", False)
        again, existed = await client.start("ctl_gate", 21, id="g-1")
        assert (again.run_id, existed) == (info.run_id, True)
        await engine.wait_until(lambda: engine.runs.latest("g-1").status == Status.PARKED)

        assert await client.describe("g-1") == await local.describe("g-1")
        assert await client.list() == await local.list()
        assert await client.list(status="completed") == []
        assert await client.history("g-1") == await local.history("g-1")

        await client.signal("g-1", "go", {"any": "json"})
        assert await engine.handle("g-1").result() == 42
        assert (await client.describe("g-1")).status == Status.COMPLETED

        new = await client.reset("g-1", to="double")
        assert new.run_id != info.run_id
        await client.start("ctl_gate", 1, id="g-2")
        await client.cancel("g-2", "no longer needed")
        with pytest.raises(Cancelled, match="no longer needed"):
            await engine.handle("g-2").result()
        await client.start("ctl_gate", 1, id="g-3")
        await client.terminate("g-3", "gone")
        assert (await client.describe("g-3")).status == Status.TERMINATED


async def test_errors_keep_their_type_and_message(home: Path, make_engine) -> None:
    async with make_engine() as engine:
        client = await _connect(home)
        await engine.start("ctl_gate", 1, id="g-1")
        await engine.terminate("g-1", "done with it")
        cases: list[tuple[Any, type[Exception]]] = [
            (client.describe("nope"), NotFound),
            (client.start("no_such_workflow", 1), NotFound),
            (client.signal("g-1", "go", 1), Rejected),
            (client.resume("g-1"), Rejected),
            (client.start("ctl_gate", "x" * (5 << 20)), CodecError),
        ]
        for call, kind in cases:
            with pytest.raises(kind) as remote:
                await call
            assert type(remote.value) is kind
        with pytest.raises(Rejected) as local:
            await engine.signal("g-1", "go", 1)
        with pytest.raises(Rejected) as remote:
            await client.signal("g-1", "go", 1)
        assert str(remote.value) == str(local.value)


async def _raw(home: Path, line: bytes) -> dict[str, Any]:
    reader, writer = await asyncio.open_unix_connection(str(home / "control.sock"))
    writer.write(line)
    await writer.drain()
    answer = orjson.loads(await reader.readline())
    writer.close()
    await writer.wait_closed()
    return answer


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"not json\n", "malformed control request"),
        (b'{"args": {}}\n', "malformed control request"),
        (b'{"op": "drop_tables"}\n', "no operation 'drop_tables'"),
        (b'{"op": "_serve"}\n', "no operation '_serve'"),
        (b'{"op": "describe", "args": {"who": 1}}\n', "malformed control request"),
        (b'{"op": "describe", "args": [1]}\n', "no operation 'describe'"),
    ],
)
async def test_a_malformed_request_gets_an_error_and_the_owner_goes_on(
    home: Path, make_engine, line: bytes, says: str
) -> None:
    async with make_engine():
        answer = await _raw(home, line)
        assert answer["error"]["type"] == "Rejected"
        assert says in answer["error"]["message"]
        assert (await _connect(home)).owner == os.getpid()


async def test_a_long_home_path_is_served(tmp_path: Path, make_engine) -> None:
    from fusee_runtime import Config

    home = tmp_path / ("d" * 100) / "home"
    assert len(str(home / "control.sock")) > 108  # too long for a socket address
    async with Engine(home, app=None, config=Config()):
        assert (await _connect(home)).owner == os.getpid()
        assert (home / "control.sock").exists()


async def test_a_watch_ends_with_the_outcome_and_the_run(home: Path, make_engine) -> None:
    async with make_engine() as engine:
        client = await _connect(home)
        await engine.start("ctl_gate", 5, id="g-1")
        events = []
        async for event in client.watch("g-1", None):
            events.append(event)
            if event.get("progress", {}).get("current") == "waiting for signal 'go'":
                await engine.signal("g-1", "go")
        outcome = events[-1]["outcome"]
        assert (outcome["code"], outcome["result"]) == ("ok", 10)
        assert run_info(outcome["run"]).status == Status.COMPLETED
        assert all("progress" in e for e in events[:-1])


async def test_a_watch_cut_by_the_owner_closing_says_why(home: Path, make_engine) -> None:
    engine = make_engine()
    await engine.open()
    await engine.start("ctl_gate", 5, id="g-1")
    client = await _connect(home)
    watching = client.watch("g-1", None)
    first = await anext(watching)
    assert first["progress"]["status"] in ("running", "parked")
    await engine.close()
    with pytest.raises(Rejected, match="the engine closed before run 'g-1' finished"):
        async for _ in watching:
            pass


def test_run_json_round_trips(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from fusee_runtime import RunInfo

    info = RunInfo(
        "a", "r", "w", Status.FAILED, datetime(2026, 1, 2, tzinfo=UTC), None, "boom", {"k": 1}
    )
    assert run_info(orjson.loads(orjson.dumps(run_json(info)))) == info


async def test_a_call_slower_than_the_clients_patience_is_not_given_up(
    home: Path, make_engine, monkeypatch, holding_storage
) -> None:
    # A slow disk: the signal is recorded but not durable for longer than a
    # client waits on a silent owner. The owner's beats keep the client
    # waiting, so it never reports a failure for a signal that lands.
    from fusee_runtime.control import protocol

    monkeypatch.setattr(protocol, "ANSWER_S", 0.3)
    monkeypatch.setattr(protocol, "BEAT_S", 0.05)
    disk = holding_storage
    async with make_engine(storage=disk) as engine:
        await engine.start("ctl_gate", 4, id="g-1")
        client = await _connect(home)
        disk.armed.set()
        try:
            sending = asyncio.ensure_future(client.signal("g-1", "go", True))
            await asyncio.sleep(3 * protocol.ANSWER_S)  # the disk holds the write this long
            assert not sending.done()
        finally:
            disk.release.set()
        await sending
        assert await engine.handle("g-1").result() == 8


async def test_a_request_that_never_ends_is_dropped(home: Path, make_engine, monkeypatch) -> None:
    from fusee_runtime.control import protocol

    monkeypatch.setattr(protocol, "ANSWER_S", 0.2)
    async with make_engine():
        reader, writer = await asyncio.open_unix_connection(str(home / "control.sock"))
        writer.write(b'{"op": "ping"')  # and never a newline
        await writer.drain()
        assert await reader.read() == b""  # the owner hung up
        writer.close()
        await writer.wait_closed()
        assert (await _connect(home)).owner == os.getpid()


async def test_a_reader_that_goes_away_is_no_error_of_the_owner(
    home: Path, make_engine, monkeypatch, caplog
) -> None:
    # A follower (`fusee start`, `result --wait`) stopped with Ctrl-C: its end of a
    # watch closes, and the owner's next beat finds nobody. Nothing to log.
    from fusee_runtime.control import protocol
    from fusee_runtime.control.server import ControlServer

    monkeypatch.setattr(protocol, "BEAT_S", 0.01)
    async with make_engine(control=False) as engine:
        server = ControlServer(engine)
        await server.start()
        try:
            await engine.start("ctl_gate", 1, id="g-1")
            reader, writer = await asyncio.open_unix_connection(str(home / "control.sock"))
            writer.write(b'{"op": "watch", "args": {"id": "g-1"}}\n')
            await writer.drain()
            assert await reader.readline()  # the watch is on: an event or a beat
            writer.transport.abort()  # the follower's process ends, its beats unread
            await server.idle()  # the owner has met the closed connection
        finally:
            await server.close()
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


async def test_an_owner_that_goes_away_mid_request_is_one_error_not_a_reset(
    home: Path,
) -> None:
    # An owner that closes with the request unread (a `result --wait` whose run just
    # closed): the client's read gets ECONNRESET, said as OwnerLost, not a traceback.
    from fusee_runtime.control import protocol
    from fusee_runtime.control.client import OwnerLost

    home.mkdir(parents=True)
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.setblocking(False)
    with protocol.socket_address(home / protocol.SOCKET_NAME) as address:
        listener.bind(address)
    listener.listen()

    async def vanish() -> None:
        conn, _ = await loop.sock_accept(listener)
        await loop.sock_recv(conn, 1)  # the request arrived; the rest stays unread
        conn.close()

    owner = asyncio.ensure_future(vanish())
    try:
        with pytest.raises(OwnerLost, match="closed the connection before answering 'describe'"):
            await ControlClient(home, 4242).describe("x" * 100_000)
        await owner
    finally:
        listener.close()
