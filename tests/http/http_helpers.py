"""Helpers for the HTTP API tests: noting responses, checking an error answer, waiting on
the engine, a `fusee serve` child."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from fusee_runtime import Engine, Status


@dataclass(frozen=True)
class Seen:
    """One response a test got."""

    method: str
    path: str
    status: int
    body: Any


def noting(seen: list[Seen]) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx response hook that notes each response in `seen`."""

    async def note(response: httpx.Response) -> None:
        await response.aread()
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = response.content  # not JSON: the OpenAPI test says so
        request = response.request
        seen.append(Seen(request.method, request.url.path, response.status_code, body))

    return note


def error_of(answer: httpx.Response, status: int, type: str, *says: str) -> str:
    """Checks an error answer: its status, JSON body, type, and fragments of its message;
    returns the message."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    doc = answer.json()
    assert set(doc) == {"error"}
    assert set(doc["error"]) == {"type", "message"}
    assert doc["error"]["type"] == type, doc
    message = doc["error"]["message"]
    for fragment in says:
        assert fragment in message, message
    return message


async def until(engine: Engine, id: str, *statuses: Status) -> None:
    """Waits on the engine's progress until the newest run of `id` has one of `statuses`."""
    await engine.wait_until(
        lambda: id in engine.runs.newest and engine.runs.latest(id).status in statuses
    )


class RawRequest:
    """A request written whole on its own connection before the caller goes on, so a
    request the caller sends next reaches the server after it; the answer is read later."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def send(cls, url: str, target: str) -> RawRequest:
        host, _, port = url.removeprefix("http://").rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        head = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        writer.write(head.encode())
        await writer.drain()
        return cls(reader, writer)

    async def answer(self) -> tuple[int, Any]:
        """The status and JSON body of the answer (the server closes after it)."""
        try:
            data = await self._reader.read()
        finally:
            self._writer.close()
            await self._writer.wait_closed()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), orjson.loads(body)


@dataclass
class Served:
    """A `fusee serve` child: where it serves HTTP, and the child itself."""

    url: str
    home: Path
    child: subprocess.Popen[str]
    serving: dict[str, Any]

    def stop(self) -> tuple[int, list[dict[str, Any]], str]:
        """SIGTERM; waits for the exit. Its code, the JSON lines it printed after
        `serving`, and its stderr."""
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
        out, err = self.child.communicate()
        return self.child.returncode, [orjson.loads(line) for line in out.splitlines()], err
