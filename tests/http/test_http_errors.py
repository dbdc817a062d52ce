"""Every error of the HTTP API is JSON, `{"error": {"type", "message"}}`, with its status."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from http_helpers import error_of

from fusee_runtime import Ctx, Engine, EngineClosed, JournalFailed, workflow
from fusee_runtime.control import routes
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.limits import BODY_BYTES_MAX


@workflow
async def http_err_gate(ctx: Ctx, _: None) -> Any:
    return await ctx.wait_for("go")


@workflow
async def http_err_other(ctx: Ctx, _: None) -> None:
    return None


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"workflow": ', "line 1 column 14 (char 13)"),
        (b"{'workflow': 'x'}", "line 1 column 2 (char 1)"),
        (b'{"workflow": "http_err_gate"}\n[', "line 2 column 1"),
        (b"NaN", "the body is not JSON"),
    ],
)
async def test_a_body_that_is_not_json_is_400_with_where(
    api: httpx.AsyncClient, body: bytes, says: str
) -> None:
    answer = await api.post("/v1/runs", content=body)
    error_of(answer, 400, "BadRequest", "the body is not JSON", says)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            [],
            "a JSON object (workflow, input, id, on_conflict, start_delay, start_at, queue, "
            "queue_key, priority, debounce, debounce_key, debounce_max, throttle), not an array",
        ),
        ("http_err_gate", "not a string"),
        ({}, "no 'workflow' field"),
        ({"workflow": 7}, "'workflow' is a string, not a number"),
        ({"workflow": None}, "'workflow' is a string, not null"),
        ({"workflow": "http_err_gate", "inputs": 1}, "unknown field 'inputs'"),
        ({"workflow": "http_err_gate", "id": ["a"]}, "'id' is a string, not an array"),
    ],
)
async def test_a_start_body_of_the_wrong_shape_is_400(
    api: httpx.AsyncClient, body: Any, says: str
) -> None:
    error_of(await api.post("/v1/runs", json=body), 400, "BadRequest", says)


async def test_an_empty_start_body_is_400(api: httpx.AsyncClient) -> None:
    error_of(await api.post("/v1/runs"), 400, "BadRequest", "no 'workflow' field")


async def test_an_unknown_workflow_is_404_and_lists_the_known_ones(
    api: httpx.AsyncClient,
) -> None:
    answer = await api.post("/v1/runs", json={"workflow": "no_such_flow"})
    error_of(answer, 404, "NotFound", "unknown workflow 'no_such_flow'", "http_err_gate")


async def test_a_bad_on_conflict_is_400(api: httpx.AsyncClient) -> None:
    body = {"workflow": "http_err_gate", "id": "b-1", "on_conflict": "replace"}
    error_of(await api.post("/v1/runs", json=body), 400, "Rejected", "'replace'")
    body["on_conflict"] = 3
    error_of(await api.post("/v1/runs", json=body), 400, "BadRequest", "'on_conflict'")


async def test_a_start_that_fails_on_a_conflict_is_409(api: httpx.AsyncClient) -> None:
    body = {"workflow": "http_err_gate", "id": "x-1", "on_conflict": "fail"}
    assert (await api.post("/v1/runs", json=body)).status_code == 201
    error_of(await api.post("/v1/runs", json=body), 409, "IdConflict", "'x-1' already exists")


async def test_a_start_on_an_id_of_another_workflow_is_409_naming_both(
    api: httpx.AsyncClient,
) -> None:
    body = {"workflow": "http_err_gate", "id": "x-2"}
    assert (await api.post("/v1/runs", json=body)).status_code == 201
    other = {"workflow": "http_err_other", "id": "x-2"}
    error_of(
        await api.post("/v1/runs", json=other),
        409,
        "IdConflict",
        "id 'x-2' belongs to a run of workflow 'http_err_gate', not 'http_err_other'",
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/runs/nope"),
        ("GET", "/v1/runs/nope/history"),
        ("GET", "/v1/runs/nope/result"),
        ("POST", "/v1/runs/nope/signals/go"),
        ("POST", "/v1/runs/nope/cancel"),
        ("POST", "/v1/runs/nope/terminate"),
        ("POST", "/v1/runs/nope/resume"),
    ],
)
async def test_an_unknown_run_is_404(api: httpx.AsyncClient, method: str, path: str) -> None:
    error_of(await api.request(method, path), 404, "NotFound", "no run with id 'nope'")


async def test_reset_of_an_unknown_run_is_404(api: httpx.AsyncClient) -> None:
    answer = await api.post("/v1/runs/nope/reset", json={"to": 1})
    error_of(answer, 404, "NotFound", "'nope'")


async def test_a_closed_run_refuses_signals_cancel_and_resume_with_400(
    api: httpx.AsyncClient,
) -> None:
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "t-1"})
    await api.post("/v1/runs/t-1/terminate", json={"reason": "done"})
    signal = await api.post("/v1/runs/t-1/signals/go", json=1)
    error_of(signal, 400, "Rejected", "run 't-1' is terminated: it takes no more signals")
    error_of(await api.post("/v1/runs/t-1/cancel"), 400, "Rejected", "already closed")
    error_of(await api.post("/v1/runs/t-1/resume"), 400, "Rejected", "nothing to resume")


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/runs/o-1/cancel", {"why": "x"}, "unknown field 'why'; fields: reason"),
        ("/v1/runs/o-1/cancel", {"reason": 1}, "'reason' is a string"),
        ("/v1/runs/o-1/terminate", "stop", "a JSON object (reason), not a string"),
        ("/v1/runs/o-1/resume", {"now": True}, "unknown field 'now'; fields: no fields"),
        ("/v1/runs/o-1/reset", {}, "no 'to' field"),
        ("/v1/runs/o-1/reset", {"to": True}, "'to' is an operation number, a position or"),
        ("/v1/runs/o-1/reset", {"to": 1.5}, "'to' is an operation number, a position or"),
    ],
)
async def test_an_action_body_of_the_wrong_shape_is_400(
    api: httpx.AsyncClient, path: str, body: Any, says: str
) -> None:
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "o-1"})
    error_of(await api.post(path, json=body), 400, "BadRequest", says)


async def test_a_signal_value_that_is_not_json_is_400(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "v-1"})
    answer = await api.post("/v1/runs/v-1/signals/go", content=b"yes")
    error_of(answer, 400, "BadRequest", "the body is not JSON")


async def test_a_bad_signal_name_is_400(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "n-1"})
    answer = await api.post(f"/v1/runs/n-1/signals/{'s' * 1000}", json=1)
    error_of(answer, 400, "Rejected", "a signal name")


async def test_reset_to_a_step_the_run_never_had_is_404(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "w-1"})
    answer = await api.post("/v1/runs/w-1/reset", json={"to": "nowhere"})
    error_of(answer, 404, "NotFound", "no operation named 'nowhere'")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"limit": "0"}, "limit is a positive whole number, not '0'"),
        ({"limit": "ten"}, "not 'ten'"),
        ({"status": "asleep"}, "unknown status 'asleep'"),
        ({"state": "running"}, "unknown query parameter 'state'"),
    ],
)
async def test_a_bad_list_query_is_400(
    api: httpx.AsyncClient, query: dict[str, str], says: str
) -> None:
    answer = await api.get("/v1/runs", params=query)
    error_of(answer, 400, "Rejected" if "status" in query else "BadRequest", says)


@pytest.mark.parametrize("wait", ["-1", "soon", "nan", "inf"])
async def test_a_bad_wait_is_400(api: httpx.AsyncClient, wait: str) -> None:
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "a-1"})
    answer = await api.get("/v1/runs/a-1/result", params={"wait": wait})
    error_of(answer, 400, "BadRequest", f"wait is a number of seconds, 0 or more, not {wait!r}")


async def test_a_repeated_query_parameter_is_400(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/runs?limit=1&limit=2")
    error_of(answer, 400, "BadRequest", "'limit' is given more than once")


async def test_a_body_over_the_limit_is_413(api: httpx.AsyncClient) -> None:
    big = b'"' + b"x" * BODY_BYTES_MAX + b'"'
    error_of(await api.post("/v1/complete/t", content=big), 413, "PayloadTooLarge")


async def test_an_unknown_route_is_404_and_a_wrong_method_405(api: httpx.AsyncClient) -> None:
    for path in ("/v1/nothing", "/nothing", "/v1/runs/", "/v2/runs", "/v1/runs/a/b/c/d"):
        error_of(await api.get(path), 404, "NotFound", f"no route GET {path}", "openapi.json")
    answer = await api.delete("/v1/runs")
    error_of(answer, 405, "MethodNotAllowed", "/v1/runs takes GET, HEAD, POST, not DELETE")
    assert answer.headers["allow"] == "GET, HEAD, POST"
    error_of(await api.get("/v1/runs/a/cancel"), 405, "MethodNotAllowed", "takes POST")
    error_of(await api.post("/v1/health"), 405, "MethodNotAllowed", "takes GET, HEAD")


async def test_a_completion_token_of_another_home_is_404(api: httpx.AsyncClient) -> None:
    token = "0" * 32 + "-1-1-" + "0" * 32
    error_of(await api.post(f"/v1/complete/{token}", json=1), 404, "NotFound")
    error_of(await api.post(f"/v1/fail/{token}", json="no"), 404, "NotFound")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (None, "not null"),
        (b"3", "not a number"),
        (b'{"msg": "x"}', 'the body is {"message": TEXT} or a JSON string'),
        (b'{"message": 1}', "not a number"),
    ],
)
async def test_a_fail_body_is_a_message(api: httpx.AsyncClient, body: bytes, says: str) -> None:
    error_of(await api.post("/v1/fail/t", content=body), 400, "BadRequest", says)


@pytest.mark.parametrize(
    ("error", "status"),
    [(EngineClosed("the engine closed"), 503), (JournalFailed("disk gone"), 503)],
)
async def test_an_engine_that_stopped_taking_work_is_503(
    engine: Engine, client_of, monkeypatch: pytest.MonkeyPatch, error: Exception, status: int
) -> None:
    control = Control(engine)

    async def refuse(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(control, "signal", refuse)
    api = client_of(build_app(control))
    answer = await api.post("/v1/runs/any/signals/go")
    error_of(answer, status, type(error).__name__, str(error))


async def test_a_closed_engine_is_503(make_engine, client_of) -> None:
    engine = make_engine(control=False)
    await engine.open()
    api = client_of(build_app(Control(engine)))
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "e-1"})
    await engine.close()
    answer = await api.get("/v1/runs/e-1/result", params={"wait": 30})
    error_of(answer, 503, "EngineClosed", "the engine closed before run 'e-1' finished")


async def test_a_bug_is_a_500_of_one_line_and_the_log_has_the_rest(
    engine: Engine, client_of, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    control = Control(engine)

    async def broken(id: str) -> None:
        raise RuntimeError("internal\nstate")

    monkeypatch.setattr(control, "describe", broken)
    api = client_of(build_app(control))
    with caplog.at_level(logging.ERROR, logger="fusee"):
        answer = await api.get("/v1/runs/x")
    message = error_of(answer, 500, "InternalError", "RuntimeError: internal")
    assert "\n" not in message
    assert "Traceback" not in answer.text
    assert "GET /v1/runs/x" in caplog.text
    assert "Traceback" in caplog.text


def test_statuses_of_engine_errors() -> None:
    from fusee_runtime import Cancelled, CodecError, NotFound, Rejected, TimedOut

    cases = [
        (NotFound("x"), 404),
        (Rejected("x"), 400),
        (CodecError("x"), 400),
        (EngineClosed("x"), 503),
        (JournalFailed("x"), 503),
        (TimedOut("x"), 409),
        (Cancelled("x"), 409),
    ]
    assert [routes.status_of(error) for error, _ in cases] == [status for _, status in cases]


async def test_digits_that_are_not_ascii_are_bad_input_not_a_500(api: httpx.AsyncClient) -> None:
    """Found in review: "²".isdigit() is true, and int("²") raised."""
    error_of(await api.get("/v1/runs", params={"limit": "²"}), 400, "BadRequest", "limit")
    await api.post("/v1/runs", json={"workflow": "http_err_gate", "id": "d-1"})
    reset = await api.post("/v1/runs/d-1/reset", json={"to": "²"})
    error_of(reset, 404, "NotFound", "no operation named '²'")
