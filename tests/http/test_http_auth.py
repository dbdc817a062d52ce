"""A token guards every route but the completion URLs; beyond loopback there is always one."""

from __future__ import annotations

import httpx
import pytest
from http_helpers import error_of

from fusee_runtime import Engine, Rejected
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app, check_bind

TOKEN = "s3cret-token-of-the-tests"


@pytest.fixture
def guarded(engine: Engine, client_of) -> httpx.AsyncClient:
    """A client without credentials of an API that needs `TOKEN`."""
    return client_of(build_app(Control(engine), token=TOKEN))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/health"),
        ("GET", "/v1/openapi.json"),
        ("GET", "/v1/runs"),
        ("POST", "/v1/runs"),
        ("GET", "/v1/runs/any/result"),
        ("GET", "/v1/no-such-route"),  # 401 before 404: the routes are not told to strangers
    ],
)
@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"]
)
async def test_without_the_token_every_route_is_401(
    guarded: httpx.AsyncClient, method: str, path: str, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    answer = await guarded.request(method, path, headers=headers, json={"workflow": "x"})
    error_of(answer, 401, "Unauthorized", "Authorization: Bearer")
    assert answer.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("path", ["/v1/complete/any", "/v1/fail/any"])
async def test_a_completion_url_needs_only_its_completion_token(
    guarded: httpx.AsyncClient, path: str
) -> None:
    """Whoever `send` gave the URL to can use it: its token is its credential."""
    answer = await guarded.post(path, json={"message": "no"} if "fail" in path else 1)
    error_of(answer, 404, "NotFound", "not a completion token of this home")
    other = await guarded.get(path)  # the exemption is for POST to these routes only
    error_of(other, 401, "Unauthorized")


async def test_with_the_token_every_route_answers(engine: Engine, client_of) -> None:
    api = client_of(build_app(Control(engine), token=TOKEN), Authorization=f"Bearer {TOKEN}")
    assert (await api.get("/v1/health")).status_code == 200
    assert (await api.get("/v1/openapi.json")).status_code == 200
    assert (await api.get("/v1/runs")).json() == []
    error_of(await api.get("/v1/runs/nope"), 404, "NotFound", "'nope'")
    error_of(await api.get("/v1/no-such-route"), 404, "NotFound", "no route")
    lower = await api.get("/v1/health", headers={"Authorization": f"bearer {TOKEN}"})
    assert lower.status_code == 200  # the scheme is case-insensitive (RFC 9110)


async def test_an_empty_token_means_none(engine: Engine, client_of) -> None:
    api = client_of(build_app(Control(engine), token=""))
    assert (await api.get("/v1/health")).status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com", ""])
def test_beyond_loopback_a_token_is_needed(host: str) -> None:
    with pytest.raises(Rejected) as refused:
        check_bind(host, None)
    assert str(refused.value) == f"binding {host or '*'} needs --token or FUSEE_TOKEN"
    with pytest.raises(Rejected):
        check_bind(host, "")
    check_bind(host, TOKEN)


@pytest.mark.parametrize("token", ["short", " " * 20, f" {TOKEN}", "x" * 15])
def test_a_token_that_guards_little_is_refused(token: str) -> None:
    with pytest.raises(Rejected, match="at least 16 characters, without spaces around it"):
        check_bind("0.0.0.0", token)


async def test_web_pages_cannot_drive_a_loopback_server(engine: Engine, client_of) -> None:
    """Found in review: a page the developer visits could POST to 127.0.0.1 (CSRF), or
    reach it through a DNS name pointed at 127.0.0.1 (DNS rebinding)."""
    api = client_of(build_app(Control(engine)))
    body = {"workflow": "anything"}
    evil = await api.post("/v1/runs", json=body, headers={"Origin": "https://evil.example"})
    error_of(evil, 403, "Forbidden", "other origins")
    rebound = await api.post("/v1/runs", json=body, headers={"Host": "evil.example:7777"})
    error_of(rebound, 403, "Forbidden", "loopback only")
    same = await api.get("/v1/health", headers={"Origin": "http://127.0.0.1:7777"})
    assert same.status_code == 200


@pytest.mark.parametrize(
    "host", ["127.0.0.1:7777", "localhost:7777", "localhost", "localhost.", "[::1]", "[::1]:7777"]
)
async def test_loopback_hosts_in_every_spelling_are_answered(
    engine: Engine, client_of, host: str
) -> None:
    api = client_of(build_app(Control(engine)))
    assert (await api.get("/v1/health", headers={"Host": host})).status_code == 200


async def test_the_public_url_host_is_answered_behind_a_proxy(engine: Engine, client_of) -> None:
    """Found in re-review: with --public-url and no token, a proxy that keeps the Host
    header got 403 for everything, completion URLs included."""
    engine.http_url = "https://fusee.example.com"
    api = client_of(build_app(Control(engine)))
    headers = {"Host": "fusee.example.com", "Origin": "https://fusee.example.com"}
    assert (await api.get("/v1/health", headers=headers)).status_code == 200
    other = await api.get("/v1/health", headers={"Host": "elsewhere.example.com"})
    error_of(other, 403, "Forbidden", "loopback only")


async def test_a_cross_site_post_without_origin_is_refused(engine: Engine, client_of) -> None:
    """Found in review of the web UI: with no Origin header the check let anything
    through; a browser's `Sec-Fetch-Site: cross-site` now refuses it too."""
    api = client_of(build_app(Control(engine)))
    crossing = {"Sec-Fetch-Site": "cross-site"}
    refused = await api.post("/v1/runs", json={"workflow": "x"}, headers=crossing)
    error_of(refused, 403, "Forbidden", "other origins")
    assert (await api.get("/v1/health", headers=crossing)).status_code == 200  # a link


async def test_behind_an_https_proxy_the_login_cookie_is_secure(engine: Engine) -> None:
    """Found in review of the web UI: uvicorn serves plain HTTP, so the scheme never said
    HTTPS; the public URL does."""
    engine.http_url = "https://fusee.example.com"
    transport = httpx.ASGITransport(app=build_app(Control(engine), token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://fusee.example.com") as c:
        answer = await c.post(
            "/login",
            content=f"token={TOKEN}&next=/",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 303
        assert "; Secure" in answer.headers["set-cookie"]
        session = answer.headers["set-cookie"].split(";", 1)[0]
        assert (await c.get("/v1/health", headers={"Cookie": session})).status_code == 200
        assert (await c.get("/v1/health")).status_code == 401
