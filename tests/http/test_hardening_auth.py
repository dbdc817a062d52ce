"""The web UI's login cookie against hostile clients, and logging out (issue 36, items 5, 6).

Found in review: a session cookie of some thousand digits, sent without logging in,
was a 500 and 1.7 KB of traceback in the log for each request (`int()` refuses over
4,300 digits); and after `POST /logout` the same cookie went on working for the seven
days it was issued for. The cookie is now a random session id the server keeps, read
from the header in one pass; logging out makes the server forget it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx
import pytest
from http_helpers import Served, error_of

from fusee_runtime import Engine
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.limits import HEAD_BYTES_MAX
from fusee_runtime.control.ui.auth import cookie_name

TOKEN = "s3cret-token-of-the-tests"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
HOSTILE = [
    "9" * 5_000,  # was int() of 5,000 digits: ValueError, a 500
    "9" * 5_000 + ".0",
    "\u00b2.0",  # "²": a digit to str.isdigit, not to int()
    '"' + "\\\\" * 6_000 + '"',  # http.cookies unquotes this in quadratic time
    "",
    "=;=;;",
]
"""Values of the session cookie a client may send without ever logging in."""


def hostile_cookies(host: str) -> list[bytes]:
    """`Cookie` headers, each with one `HOSTILE` session, for a server at `host`."""
    headers = [f"{cookie_name(host)}={value}" for value in HOSTILE] + ["=" * 8_000, ";" * 8_000]
    return [header.encode("latin-1") for header in headers]


async def login(client: httpx.AsyncClient) -> str:
    """Logs in with the token; the `Cookie` header the browser would send back."""
    answer = await client.post("/login", content=f"token={TOKEN}&next=/runs", headers=FORM)
    assert (answer.status_code, answer.headers["location"]) == (303, "/runs"), answer.text
    return answer.headers["set-cookie"].split(";", 1)[0]


async def assert_refused(client: httpx.AsyncClient, cookie: str | bytes) -> None:
    """A request carrying `cookie` gets what one without it gets: 401 from the API, the
    login form for a page."""
    headers = {"Cookie": cookie}
    error_of(await client.get("/v1/health", headers=headers), 401, "Unauthorized")
    page = await client.get("/schedules", headers=headers)
    assert (page.status_code, page.headers["location"]) == (303, "/login?next=/schedules")


async def test_a_hostile_session_cookie_is_refused_and_logs_nothing(
    engine: Engine, client_of, caplog: pytest.LogCaptureFixture
) -> None:
    browser = client_of(build_app(Control(engine), token=TOKEN))
    with caplog.at_level(logging.DEBUG):
        for cookie in hostile_cookies("127.0.0.1:7777"):
            await assert_refused(browser, cookie)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # Beside a hostile one, a real session is still found.
    session = await login(browser)
    for cookie in hostile_cookies("127.0.0.1:7777"):
        both = cookie + b"; " + session.encode()
        assert (await browser.get("/v1/health", headers={"Cookie": both})).status_code == 200


async def test_logging_out_ends_the_session_on_the_server(engine: Engine, client_of) -> None:
    browser = client_of(build_app(Control(engine), token=TOKEN))
    session, other = await login(browser), await login(browser)
    assert (await browser.get("/v1/health", headers={"Cookie": session})).status_code == 200
    page = await browser.get("/schedules", headers={"Cookie": session})
    assert page.status_code == 200 and 'action="/logout"' in page.text
    out = await browser.post("/logout", headers={"Cookie": session})
    assert (out.status_code, out.headers["location"]) == (303, "/login")
    assert "Max-Age=0" in out.headers["set-cookie"]
    # The browser drops the cookie; one that kept it (or stole it) is refused.
    await assert_refused(browser, session)
    # Another browser's login goes on; logging out twice, or without a cookie, is harmless.
    assert (await browser.get("/v1/health", headers={"Cookie": other})).status_code == 200
    assert (await browser.post("/logout", headers={"Cookie": session})).status_code == 303
    assert (await browser.post("/logout")).status_code == 303
    assert (await browser.get("/v1/health", headers={"Cookie": other})).status_code == 200


async def test_cookies_split_over_several_headers_are_all_read(engine: Engine, client_of) -> None:
    # A proxy may split cookies over several `Cookie` headers: the API reads them all,
    # as the pages do.
    browser = client_of(build_app(Control(engine), token=TOKEN))
    session = await login(browser)
    split = [("Cookie", session), ("Cookie", "theme=dark")]
    assert (await browser.get("/v1/health", headers=split)).status_code == 200
    assert (await browser.get("/schedules", headers=split)).status_code == 200


async def test_over_a_real_socket_hostile_cookies_are_401_and_logout_holds(
    serve: Callable[..., Served],
) -> None:
    """The same through `fusee serve --http --token`: the log (its stdout) and stderr
    stay clean, and no answer is a 500."""
    served = serve("--token", TOKEN)
    host = served.url.partition("://")[2].rstrip("/")
    async with httpx.AsyncClient(base_url=served.url) as browser:
        for cookie in hostile_cookies(host):
            await assert_refused(browser, cookie)
        # As large as the server takes a request's head, of backslashes.
        backslashes = "\\" * (HEAD_BYTES_MAX - 200)
        big = f'{cookie_name(host)}="{backslashes}"'
        error_of(await browser.get("/v1/health", headers={"Cookie": big}), 401, "Unauthorized")
        session = await login(browser)
        assert (await browser.get("/v1/health", headers={"Cookie": session})).status_code == 200
        assert (await browser.post("/logout", headers={"Cookie": session})).status_code == 303
        await assert_refused(browser, session)
    code, events, stderr = await asyncio.to_thread(served.stop)
    assert code == 0, stderr
    logged = [e for e in events if e["event"] == "log" and e["level"] in ("warning", "error")]
    assert logged == [], logged
    assert "Traceback" not in stderr and "Exception" not in stderr, stderr[-2000:]
