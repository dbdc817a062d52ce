"""Deep or huge input through the HTTP API and the Python API (issue 16, item 5).

A `limit` past `LIST_LIMIT_MAX` is a 400, not a 500 (SQLite's OverflowError,
or int() refusing over 4,300 digits); `Engine.list` refuses it too. A body
nested deeper than JSON can be written back is a 400, and `Engine.start`
raises `CodecError` for such a value, not orjson's TypeError.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from http_helpers import error_of

from fusee_runtime import CodecError, Ctx, Engine, NotFound, Rejected, workflow
from fusee_runtime.engine.engine import LIST_LIMIT_MAX


@workflow
async def http_bad_gate(ctx: Ctx, value: Any) -> Any:
    return await ctx.wait_for("go")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "limit", ["99999999999999999999", str(LIST_LIMIT_MAX + 1), "9" * 5000], ids=["20", "+1", "5k"]
)
async def test_a_list_limit_past_the_maximum_is_400(api: httpx.AsyncClient, limit: str) -> None:
    await api.post("/v1/runs", json={"workflow": "http_bad_gate", "id": "g-1"})
    answer = await api.get("/v1/runs", params={"limit": limit})
    message = error_of(answer, 400, "BadRequest", f"limit is at most {LIST_LIMIT_MAX}, not ")
    assert len(message) < 200, message  # a 5,000-digit limit is not echoed whole


@pytest.mark.parametrize("limit", [str(LIST_LIMIT_MAX), "0001"])
async def test_a_list_limit_up_to_the_maximum_lists(api: httpx.AsyncClient, limit: str) -> None:
    await api.post("/v1/runs", json={"workflow": "http_bad_gate", "id": "g-1"})
    answer = await api.get("/v1/runs", params={"limit": limit})
    assert answer.status_code == 200, answer.text
    assert [run["id"] for run in answer.json()] == ["g-1"]


@pytest.mark.parametrize(
    "limit",
    [10**20, LIST_LIMIT_MAX + 1, 10**5000, 0, -1, True, "5"],
    ids=["1e20", "max+1", "1e5000", "0", "-1", "True", "str"],
)
async def test_engine_list_refuses_a_limit_out_of_range(engine: Engine, limit: Any) -> None:
    """Before: 10**20 raised SQLite's OverflowError, -1 dropped the oldest run, 0 gave []."""
    await engine.start("http_bad_gate", None, id="g-1")
    await engine.start("http_bad_gate", None, id="g-2")
    with pytest.raises(Rejected, match=f"limit is a whole number from 1 to {LIST_LIMIT_MAX}"):
        await engine.list(limit=limit)
    assert [info.id for info in await engine.list(limit=LIST_LIMIT_MAX)] == ["g-2", "g-1"]


DEEP = b"[" * 300 + b"]" * 300
"""Valid JSON (orjson reads 1,024 levels) that orjson cannot write back (254)."""


async def test_a_body_nested_too_deep_is_400(api: httpx.AsyncClient) -> None:
    body = b'{"workflow": "http_bad_gate", "id": "g-1", "input": ' + DEEP + b"}"
    error_of(await api.post("/v1/runs", content=body), 400, "CodecError", "Recursion limit")
    await api.post("/v1/runs", json={"workflow": "http_bad_gate", "id": "g-2"})
    signal = await api.post("/v1/runs/g-2/signals/go", content=DEEP)
    error_of(signal, 400, "CodecError", "Recursion limit")
    listed = (await api.get("/v1/runs")).json()
    assert [run["id"] for run in listed] == ["g-2"]


async def test_engine_start_with_a_value_nested_too_deep_raises_codec_error(
    engine: Engine,
) -> None:
    with pytest.raises(CodecError, match="cannot be encoded as JSON"):
        await engine.start("http_bad_gate", {"a": nested(300)}, id="g-1")
    with pytest.raises(NotFound):
        await engine.handle("g-1").describe()
