"""Every declared control operation is served by every face (control/ops.py).

An operation is declared once, in `ops.Operations` and its descriptor in
`ops.OPS`. These tests fail when one is added there and a face misses it:
the engine in process (`Control`), the socket server's dispatch and its
client (`ControlClient`, over a real engine's socket), the router between
journals (`ShardRouter`, over two real engines), and the HTTP routes (each
operation is served by a route, or declared as not over HTTP). Each check
is shown to fail on a declaration with an operation no face serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import orjson
import pytest

from fusee_runtime import Config, Engine, FuseeError
from fusee_runtime.control import ops
from fusee_runtime.control.api import Control
from fusee_runtime.control.client import Client, ControlClient
from fusee_runtime.control.ops import OPS, Operations, Param, Route
from fusee_runtime.control.router import LocalClient, ShardRouter
from fusee_runtime.control.routes import ROUTES
from fusee_runtime.store.shards import Layout

UNSERVED = (
    "the control API has no operation",  # the server does not know the name
    "a malformed control request",  # its arguments are not the implementation's
    "the owner failed to answer",  # the server knows it, the implementation has no method
)
"""What the owner answers for an operation it does not serve."""


def _sample(param: Param) -> Any:
    """A value of the parameter's type (a run, token or name that does not exist)."""
    if get_origin(param.type) is Literal:
        return get_args(param.type)[0]
    return {int: 1, float: 1.0, bool: True}.get(param.type, "nothing-here")


def _args(op: ops.Op, every: bool = False) -> dict[str, Any]:
    """Its required arguments (`every`: with the optional ones at their defaults)."""
    return {
        p.name: _sample(p) if p.required else p.default for p in op.params if every or p.required
    }


def _protocol_methods() -> set[str]:
    return {
        name
        for name, member in vars(Operations).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


# -- the declaration and the faces that follow from it in code ------------------------


def _undeclared(declared: dict[str, ops.Op]) -> list[str]:
    """Operations of the Protocol without a descriptor, descriptors of none."""
    names = _protocol_methods()
    wrong = [f"{key}: named {op.name!r}" for key, op in declared.items() if key != op.name]
    return wrong + sorted(names ^ set(declared))


def _not_implemented(declared: dict[str, ops.Op]) -> list[str]:
    """Operations `Control` or `Client` do not define themselves (an explicit subclass of a
    Protocol would inherit its empty method)."""
    return [
        f"{cls.__name__}.{name}"
        for name in declared
        for cls in (Control, Client)
        if name not in vars(cls)
    ]


def _over_http(declared: dict[str, ops.Op]) -> list[str]:
    """Operations the HTTP API should serve and does not, or serves and should not; routes
    of no declared operation; an act served by GET (or HEAD)."""
    served = {id(op): op for _, _, op, _ in ROUTES if op is not None}
    found = [
        f"{op.name}: http={op.http}" for op in declared.values() if op.http != (id(op) in served)
    ]
    found += [f"{op.name}: not declared" for op in served.values() if op not in declared.values()]
    found += [
        f"{m} {path}: {op.name} acts"
        for m, path, op, _ in ROUTES
        if op and op.acts and m in ("GET", "HEAD")
    ]
    return found


def _unrouted(declared: dict[str, ops.Op]) -> list[str]:
    """Operations a router between journals would not know where to send."""
    found = [op.name for op in declared.values() if not isinstance(op.route, Route)]
    found += [op.name for op in declared.values() if op.streams and op.route is not Route.ID]
    needs_id = (Route.ID, Route.ANY)
    return found + [
        op.name
        for op in declared.values()
        if op.route in needs_id and "id" not in {p.name for p in op.params}
    ]


CHECKS: list[Callable[[dict[str, ops.Op]], list[str]]] = [
    _undeclared,
    _not_implemented,
    _over_http,
    _unrouted,
]


def _frobnicate(http: bool = True, route: Route = Route.ID) -> ops.Op:
    """An operation declared as every other, that no face serves."""
    return ops.Call(
        "frobnicate",
        (Param("id", str, True),),
        acts=True,
        route=route,
        http=http,
        call=lambda o, a: o.frobnicate(**a),  # type: ignore[attr-defined]
        answer=lambda answer, args: answer,
    )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_every_face_in_code_knows_every_operation(check: Callable[..., list[str]]) -> None:
    assert check(OPS) == []


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_each_check_finds_an_operation_a_face_misses(check: Callable[..., list[str]]) -> None:
    route: Any = "somewhere" if check is _unrouted else Route.ID
    damaged = {**OPS, "frobnicate": _frobnicate(http=True, route=route)}
    assert check(damaged) != []


def test_a_descriptor_calls_the_method_of_its_own_name() -> None:
    """Each descriptor's typed call reaches the method it was made from, with the arguments
    as sent (an implementation that records which method was called)."""
    called: list[tuple[str, dict[str, Any]]] = []

    def method(name: str, streams: bool) -> Callable[..., Any]:
        if streams:

            async def events(self: Any, **args: Any) -> AsyncGenerator[Any, None]:
                called.append((name, args))
                yield None

            return events

        async def answer(self: Any, **args: Any) -> Any:
            called.append((name, args))

        return answer

    members = {n: method(n, inspect.isasyncgenfunction(vars(Control)[n])) for n in OPS}
    recorder: Any = type("Recorder", (), members)()

    async def each() -> None:
        for op in OPS.values():
            args = _args(op, every=True)
            if isinstance(op, ops.Stream):
                async with contextlib.aclosing(op.call(recorder, args)) as events:
                    async for _ in events:
                        pass
            else:
                await op.call(recorder, args)
            assert called[-1] == (op.name, args)

    asyncio.run(each())


# -- the socket: the server dispatches it, the client sends it ------------------------


async def _raw(home: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The final line of the owner's answer to one request line."""
    reader, writer = await asyncio.open_unix_connection(str(home / "control.sock"))
    try:
        writer.write(orjson.dumps(doc) + b"\n")
        await writer.drain()
        while True:
            line = orjson.loads(await reader.readline())
            if "ok" in line or "error" in line:
                return line
    finally:
        writer.close()
        await writer.wait_closed()


def _unserved(answer: dict[str, Any]) -> str | None:
    message = answer.get("error", {}).get("message", "")
    return message if any(said in message for said in UNSERVED) else None


async def _asked(client: Client, op: ops.Op) -> str | None:
    """The typed method of `op`'s name, called with its required arguments: None when
    the owner served it (an answer, or an error of the engine's); else what it said."""
    method = getattr(client, op.name)
    try:
        if isinstance(op, ops.Stream):
            async with contextlib.aclosing(method(**_args(op))) as events:
                async for _ in events:
                    pass
        else:
            await method(**_args(op))
    except FuseeError as e:
        return str(e) if any(said in str(e) for said in UNSERVED) else None
    return None


class _Recording(ControlClient):
    """The socket's client, keeping the descriptor and arguments of each request."""

    sent: list[tuple[ops.Op, dict[str, Any]]]

    async def call(self, op: ops.Call[..., Any], args: ops.Args) -> Any:
        self.sent.append((op, args))
        return await super().call(op, args)

    def events(self, op: ops.Stream[..., Any], args: ops.Args) -> AsyncGenerator[Any, None]:
        self.sent.append((op, args))
        return super().events(op, args)


@pytest.mark.parametrize("name", sorted(OPS))
async def test_the_socket_serves_every_operation(home: Path, name: str) -> None:
    op = OPS[name]
    async with Engine(home, app=None, config=Config(segment_bytes=8 << 20)):
        # The server: the name on the wire, and every argument the declaration names.
        assert _unserved(await _raw(home, {"op": op.name, "args": _args(op, every=True)})) is None
        # The client: its method of that name sends this operation, by name, as declared.
        client = _Recording(home, None)
        client.sent = []
        assert await _asked(client, op) is None
        assert [sent for sent, _ in client.sent] == [op]
        assert set(client.sent[0][1]) <= {p.name for p in op.params}


async def test_the_socket_check_finds_an_operation_the_owner_cannot_serve(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Engine(home, app=None, config=Config(segment_bytes=8 << 20)):
        assert _unserved(await _raw(home, {"op": "frobnicate", "args": {"id": "x"}}))
        # Declared, but `Control` has no such method: the owner says it failed.
        monkeypatch.setitem(OPS, "frobnicate", _frobnicate())
        assert _unserved(await _raw(home, {"op": "frobnicate", "args": {"id": "x"}}))


# -- the router between journals -----------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPS))
async def test_the_router_routes_every_operation(tmp_path: Path, name: str) -> None:
    """Through a router over two journals (two local engines: where the calls go is the
    router's business, not the store's), every operation reaches an engine and answers."""
    op = OPS[name]
    layout = Layout("postgresql://nowhere/fusee", "fusee", 2)
    async with contextlib.AsyncExitStack() as stack:
        engines = [
            await stack.enter_async_context(
                Engine(
                    tmp_path / f"shard-{k}",
                    app=None,
                    config=Config(control=False, segment_bytes=8 << 20),
                )
            )
            for k in range(2)
        ]
        router = ShardRouter(layout, [LocalClient(Control(e)) for e in engines])
        assert await _asked(router, op) is None
