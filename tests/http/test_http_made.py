"""Made over HTTP (issue 38): cron schedules made, changed, backfilled and deleted at run
time (`/v1/schedules`), and a run that begins later (`start_delay`, `start_at`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fusee_runtime import Ctx, Engine, FakeClock, workflow


@workflow(name="hm.echo")
async def hm_echo(ctx: Ctx, value: Any) -> Any:
    return value


async def test_a_schedule_is_made_changed_backfilled_and_deleted(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    body = {"name": "hourly", "workflow": "hm.echo", "cron": "0 * * * *", "overlap": "allow"}
    made = await api.post("/v1/schedules", json=body)
    assert made.status_code == 201, made.text
    assert (made.json()["cron"], made.json()["overlap"]) == ("0 * * * *", "allow")
    again = await api.post("/v1/schedules", json=body)
    assert again.status_code == 400  # made already: update it instead
    changed = await api.patch("/v1/schedules/hourly", json={"input": {"n": 1}})
    assert (changed.status_code, changed.json()["input"]) == (200, {"n": 1})
    window = {"start": "2023-11-14T00:00:00+00:00", "end": "2023-11-14T03:00:00+00:00"}
    first = await api.post("/v1/schedules/hourly/backfill", json=window)
    assert first.status_code == 200, first.text
    assert [row["outcome"] for row in first.json()] == ["started"] * 3
    twice = await api.post("/v1/schedules/hourly/backfill", json=window)
    assert [row["outcome"] for row in twice.json()] == ["existed"] * 3
    assert [row["id"] for row in twice.json()] == [row["id"] for row in first.json()]
    assert await engine.handle(first.json()[0]["id"]).result() == {"n": 1}
    gone = await api.delete("/v1/schedules/hourly")
    assert (gone.status_code, gone.json()) == (200, {"name": "hourly"})
    assert (await api.delete("/v1/schedules/hourly")).status_code == 404
    listed = (await api.get("/v1/schedules")).json()
    assert "hourly" not in {row.get("name") for row in listed}


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("POST", "/v1/schedules", {"name": "x", "cron": "* * * * *"}, "no 'workflow' field"),
        (
            "POST",
            "/v1/schedules",
            {"name": None, "workflow": "hm.echo", "cron": "* * * * *"},
            "the field 'name' is a string",
        ),
        ("POST", "/v1/schedules", {"name": "x", "workflow": "hm.echo", "cron": "nope"}, "cron"),
        ("PATCH", "/v1/schedules/x", {"name": "y"}, "unknown field 'name'"),
        ("POST", "/v1/schedules/x/backfill", {"start": None, "end": None}, "ISO 8601"),
        ("POST", "/v1/runs", {"workflow": "hm.echo", "start_delay": "soon"}, "start_delay"),
        ("POST", "/v1/runs", {"workflow": "hm.echo", "start_at": "tomorrow"}, "start_at"),
        (
            "POST",
            "/v1/runs",
            {"workflow": "hm.echo", "start_at": "2030-01-01T00:00:00"},
            "start_at",
        ),
    ],
)
async def test_a_bad_schedule_or_start_is_400_and_records_nothing(
    api: httpx.AsyncClient, engine: Engine, method: str, path: str, body: Any, message: str
) -> None:
    answer = await api.request(method, path, json=body)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]["message"]
    assert await engine.list() == []


async def test_a_run_started_with_a_delay_is_scheduled_until_it_begins(
    api: httpx.AsyncClient, engine: Engine, clock: FakeClock
) -> None:
    later = await api.post(
        "/v1/runs", json={"workflow": "hm.echo", "input": 1, "id": "later", "start_delay": 60}
    )
    assert (later.status_code, later.json()["status"]) == (201, "scheduled")
    at = await api.post(
        "/v1/runs",
        json={"workflow": "hm.echo", "input": 2, "id": "at", "start_at": "2030-01-01T00:00:00Z"},
    )
    assert (at.status_code, at.json()["status"]) == (201, "scheduled")
    clock.advance(60)
    assert await engine.handle("later").result() == 1
    assert (await api.get("/v1/runs/at")).json()["status"] == "scheduled"
