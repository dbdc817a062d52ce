"""`POST /v1/control`: every declared operation (`ops.OPS`) over HTTP, for programs.

The REST routes (`routes.ROUTES`) are for people and web hooks, one route an
operation. A program's client (`fusee_runtime.Client` with `url=`) asks this
one route instead: its body is a request of the control socket's protocol
(`{"op": NAME, "args": {...}}`, `protocol`), and its answer that protocol's
lines, streamed as they come (`application/x-ndjson`): beats while a call
waits, events of a `watch` or a `stream`, then `{"ok": VALUE}` or `{"error":
...}`. The same `server.answer` serves the socket, the database's relay and
this route, so a client sees the same values and errors over each. A token,
when the server has one, guards it as every route.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fusee_runtime.control import protocol
from fusee_runtime.control.routes import Api, read_body
from fusee_runtime.control.server import answer

PATH = "/v1/control"
MEDIA_TYPE = "application/x-ndjson"


class _Lines:
    """The answer's lines, handed from `server.answer` to the response as they come."""

    def __init__(self) -> None:
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()

    def write(self, line: bytes) -> None:
        self._lines.put_nowait(line)

    async def drain(self) -> None:
        """Nothing to wait for: the response sends each line as it is queued."""

    def end(self, _: object) -> None:
        self._lines.put_nowait(None)

    async def sent(self, answering: asyncio.Future[None]) -> AsyncIterator[bytes]:
        try:
            while (line := await self._lines.get()) is not None:
                yield line
        finally:  # the client went away: the call it made stops here
            if not answering.done():
                answering.cancel()
                await asyncio.gather(answering, return_exceptions=True)


async def control(request: Request, api: Api) -> Response:
    """Answers one control request (see the module)."""
    body = await read_body(request)
    reader = asyncio.StreamReader(limit=protocol.LINE_BYTES_MAX)
    reader.feed_data(body.replace(b"\n", b" ") + b"\n")  # JSON holds no raw newline in a value
    reader.feed_eof()
    lines = _Lines()
    answering = asyncio.ensure_future(answer(api.control, reader, lines))
    answering.add_done_callback(lines.end)
    return StreamingResponse(lines.sent(answering), media_type=MEDIA_TYPE)
