"""The control socket's requests, byte for byte as the client wrote them before its
operations were declared in one place (control/ops.py, issue 37): an owner of either
version reads the requests of the other. The lines below were written by the client of
c925c76, for the calls in `_calls`, to a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime.control.client import ControlClient

RUN = {
    "id": "a",
    "run_id": "r",
    "workflow": "w",
    "status": "running",
    "started_at": "2024-01-01T00:00:00+00:00",
    "closed_at": None,
    "error": None,
    "attributes": {},
    "failure": None,
    "waiting": [],
    "parent": None,
}
ANSWERS: dict[str, Any] = {
    **dict.fromkeys(["describe", "signal", "cancel", "terminate", "resume", "reset"], RUN),
    **{"start": [RUN, False], "list": [RUN], "schedule": RUN, "ping": {"pid": 4242}},
}
"""What the owner answers, by operation (null for the rest)."""

GOLDEN = [
    '{"op":"ping","args":{}}',
    '{"op":"start","args":{"workflow":"w","input":null,"id":null,"on_conflict":"return"}}',
    '{"op":"start","args":{"workflow":"w","input":{"x":1},"id":"i","on_conflict":"fail","traceparent":"00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"}}',
    '{"op":"describe","args":{"id":"i"}}',
    '{"op":"list","args":{"status":null,"workflow":null,"limit":null}}',
    '{"op":"list","args":{"status":"open","workflow":"w","limit":5,"parent":"p","before":"r-1","where":{"k":[["=","v"]],"n":[[">",3]],"t":[["<","2024-05-01T00:00:00+00:00"]]}}}',
    '{"op":"history","args":{"id":"i"}}',
    '{"op":"log","args":{"id":"i","last":200}}',
    '{"op":"log","args":{"id":"i","last":3}}',
    '{"op":"journal","args":{"id":"i"}}',
    '{"op":"journal","args":{"id":"i","run_id":"r"}}',
    '{"op":"run_ids","args":{}}',
    '{"op":"run_ids","args":{"workflow":"w","open":true}}',
    '{"op":"signal","args":{"id":"i","name":"s","value":null}}',
    '{"op":"signal","args":{"id":"i","name":"s","value":[1]}}',
    '{"op":"cancel","args":{"id":"i","reason":"cancelled"}}',
    '{"op":"cancel","args":{"id":"i","reason":"why"}}',
    '{"op":"terminate","args":{"id":"i","reason":"terminated"}}',
    '{"op":"resume","args":{"id":"i"}}',
    '{"op":"reset","args":{"id":"i","to":2}}',
    '{"op":"reset","args":{"id":"i","to":"step"}}',
    '{"op":"complete","args":{"token":"t","value":null}}',
    '{"op":"complete","args":{"token":"t","value":1}}',
    '{"op":"fail","args":{"token":"t","message":"m"}}',
    '{"op":"query","args":{"id":"i","name":"q","arg":null}}',
    '{"op":"query","args":{"id":"i","name":"q","arg":2}}',
    '{"op":"update","args":{"id":"i","name":"u","arg":null,"update_id":null}}',
    '{"op":"update","args":{"id":"i","name":"u","arg":3,"update_id":"uid"}}',
    '{"op":"schedules","args":{}}',
    '{"op":"schedule","args":{"name":"w","action":"pause"}}',
    '{"op":"schedule","args":{"name":"w","action":"trigger"}}',
    '{"op":"prune","args":{"older_than":3.5}}',
    '{"op":"limits","args":{}}',
    '{"op":"limit","args":{"name":"l","permits":2}}',
    '{"op":"watch","args":{"id":"i","timeout":null}}',
    '{"op":"watch","args":{"id":"i","timeout":2.0}}',
    '{"op":"stream","args":{"id":"i","name":"n","follow":true}}',
    '{"op":"stream","args":{"id":"i","name":"n","follow":false}}',
]


def _calls(c: ControlClient) -> list[Awaitable[Any]]:
    at = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    where = {"k": "v", "n": (">", 3), "t": ("<", at)}
    return [
        c.ping(),
        c.start("w"),
        c.start("w", {"x": 1}, id="i", on_conflict="fail", traceparent=traceparent),
        c.describe("i"),
        c.list(),
        c.list("open", "w", 5, "p", where, "r-1"),
        c.history("i"),
        c.log("i"),
        c.log("i", 3),
        c.journal("i"),
        c.journal("i", "r"),
        c.run_ids(),
        c.run_ids("w", True),
        c.signal("i", "s"),
        c.signal("i", "s", [1]),
        c.cancel("i"),
        c.cancel("i", "why"),
        c.terminate("i"),
        c.resume("i"),
        c.reset("i", 2),
        c.reset("i", "step"),
        c.complete("t"),
        c.complete("t", 1),
        c.fail("t", "m"),
        c.query("i", "q"),
        c.query("i", "q", 2),
        c.update("i", "u"),
        c.update("i", "u", 3, "uid"),
        c.schedules(),
        c.schedule("w", "pause"),
        c.schedule("w", "trigger"),
        c.prune(3.5),
        c.limits(),
        c.limit("l", 2),
    ]


async def test_the_client_writes_the_requests_it_always_wrote(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    asked: list[str] = []

    async def owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        asked.append(line.decode().rstrip("\n"))
        answer = ANSWERS.get(orjson.loads(line)["op"])
        writer.write(orjson.dumps({"ok": answer}) + b"\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(owner, path=str(home / "control.sock"))
    async with server:
        client = ControlClient(home, 4242)
        for call in _calls(client):
            await call
        follows = [client.watch("i"), client.watch("i", 2.0)]
        follows += [client.stream("i", "n"), client.stream("i", "n", False)]
        for follow in follows:
            async with contextlib.aclosing(follow) as events:
                assert [event async for event in events] == []
    assert asked == GOLDEN
