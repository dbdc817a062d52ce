"""The control API over HTTP(S): `HttpClient`, a transport of `client.Client`.

It asks `fusee serve --http`'s `POST /v1/control` (`http_ops`), with the
server's token, and reads the answer's lines as the socket's client does
(`protocol`): beats, events, then the value or the error, raised as the
engine's exception. HTTP itself is httpx's (TLS, proxies, streaming).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Literal

import httpx
import orjson

from fusee_runtime.control import ops, protocol
from fusee_runtime.control.client import Client, OwnerGone, OwnerLost, raised
from fusee_runtime.control.http_ops import MEDIA_TYPE, PATH
from fusee_runtime.errors import Rejected
from fusee_runtime.model.json import Json

Line = tuple[Literal["event", "ok"], Json]


class HttpClient(Client):
    """The operations of the server at `url`, over HTTP(S)."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url
        self._http = http
        self._pid: int | None = None
        self._host = ""

    @classmethod
    async def reach(cls, url: str, token: str | None) -> HttpClient:
        """A client of the server at `url` that answered a `ping`.

        Raises:
            OwnerGone: nothing answers there.
            Rejected: the server refused the token (or wants one).
        """
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # Between two lines the server is silent for at most `BEAT_S`.
        timeout = httpx.Timeout(protocol.ANSWER_S)
        http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        client = cls(url, http)
        try:
            pong = await client.ping()
        except BaseException:
            await http.aclose()
            raise
        client._pid, client._host = pong["pid"], pong["host"]
        return client

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def owner(self) -> int | None:
        return self._pid

    @property
    def driver(self) -> str:
        return f"pid {self._pid} on {self._host} at {self.url}"

    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        async with contextlib.aclosing(self._exchange(op.name, args)) as lines:
            async for said, value in lines:
                if said == "ok":
                    return value
        raise AssertionError("unreachable: an exchange ends with its value or an error")

    async def events(
        self, op: ops.Stream[..., object], args: ops.Args
    ) -> AsyncGenerator[Json, None]:
        async with contextlib.aclosing(self._exchange(op.name, args)) as lines:
            async for said, value in lines:
                if said == "event":
                    yield value

    async def _exchange(self, name: str, args: ops.Args) -> AsyncGenerator[Line, None]:
        """One request's answer: its events, then its value; its error raised."""
        body = orjson.dumps({"op": name, "args": args})
        headers = {"Content-Type": "application/json", "Accept": MEDIA_TYPE}
        try:
            async with self._http.stream("POST", PATH, content=body, headers=headers) as answer:
                if answer.status_code != 200:
                    raise _refused(answer.status_code, await answer.aread())
                async for line in answer.aiter_lines():
                    if not line.strip():
                        continue
                    doc = orjson.loads(line)
                    if "beat" in doc:
                        continue
                    if "event" in doc:
                        yield "event", doc["event"]
                    elif "error" in doc:
                        raise raised(doc["error"])
                    else:
                        yield "ok", doc["ok"]
                        return
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise OwnerGone(f"nothing answers at {self.url} ({e}): nothing was sent") from None
        except (httpx.TransportError, orjson.JSONDecodeError) as e:
            why = f"{self.url} stopped answering ({e}): the call may have been done"
            raise OwnerLost(why) from None
        raise OwnerLost(f"{self.url} ended the answer early: the call may have been done")


def _refused(status: int, body: bytes) -> Exception:
    """What a server said when it did not take the request (no token, a wrong one)."""
    try:
        error = orjson.loads(body)["error"]
        if status in (401, 403):  # the token: a caller's mistake, as a refused request is
            return Rejected(f"the server refused the request: {error['message']}")
        if status == 503 and error.get("type") == "ServiceUnavailable":
            return OwnerGone(f"the server is busy, nothing was done: {error['message']}")
        return raised(error)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return Rejected(f"the server answered {status}: {body[:200]!r}")
