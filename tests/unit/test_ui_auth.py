"""The web UI's logins (`control/ui/auth.py`): a session this server issued, for the
port the browser reached it on, until it expires or the browser logs out."""

from __future__ import annotations

from fusee_runtime.control.ui.auth import (
    COOKIE_MAX_AGE_S,
    SESSIONS_MAX,
    Sessions,
    clear_cookie,
    cookie_name,
    logged_in,
)


def cookie(set_cookie: str) -> bytes:
    """The `Cookie` header a browser sends back for a `Set-Cookie`."""
    return set_cookie.split(";", 1)[0].encode()


def test_a_login_is_good_on_this_server_and_port_only() -> None:
    server, other = Sessions(), Sessions()
    issued = server.issue("127.0.0.1:7777", secure=False, now=1000)
    assert server.allowed(cookie(issued), "127.0.0.1:7777", now=1001)
    assert not other.allowed(cookie(issued), "127.0.0.1:7777", now=1001)  # another server
    assert not server.allowed(cookie(issued), "127.0.0.1:8888", now=1001)  # another port
    assert cookie_name("127.0.0.1:7777") != cookie_name("127.0.0.1:8888")
    assert cookie_name("[::1]") == cookie_name("localhost") == "fusee_session_default"


def test_a_login_expires_and_cannot_be_forged() -> None:
    server = Sessions()
    issued = cookie(server.issue("h:1", secure=False, now=1000))
    assert not server.allowed(issued, "h:1", now=1000 + COOKIE_MAX_AGE_S)
    assert not server.allowed(issued, "h:1", now=1001)  # forgotten once seen expired
    live = cookie(server.issue("h:1", secure=False, now=1000))
    assert server.allowed(live, "h:1", now=1001)
    assert not server.allowed(live[:-1], "h:1", now=1001)
    assert not server.allowed(live + b"x", "h:1", now=1001)
    assert not server.allowed(b"fusee_session_1=garbage", "h:1", now=1001)
    assert not server.allowed(b"\xff\x00;;=", "h:1", now=1001)


def test_logging_out_ends_the_session_on_the_server() -> None:
    server = Sessions()
    first, second = (cookie(server.issue("h:1", secure=False)) for _ in range(2))
    server.end(f"other=1; {first.decode()}", "h:1")
    assert not server.allowed(first, "h:1")
    assert server.allowed(second, "h:1")  # another browser's login goes on
    assert len(server) == 1


def test_the_server_keeps_a_bounded_number_of_logins() -> None:
    server = Sessions()
    oldest = cookie(server.issue("h:1", secure=False, now=1000))
    for n in range(SESSIONS_MAX):
        server.issue("h:1", secure=False, now=1001 + n)
    assert len(server) == SESSIONS_MAX
    assert not server.allowed(oldest, "h:1", now=2000)  # the oldest made room
    server.issue("h:1", secure=False, now=1000 + COOKIE_MAX_AGE_S + SESSIONS_MAX + 1)
    assert len(server) == 1  # the expired ones are forgotten as a login comes


def test_the_cookie_header_is_read_whatever_it_holds() -> None:
    server = Sessions()
    issued = cookie(server.issue("h:1", secure=False))
    for header in (
        b"fusee_session_1=" + b"9" * 10_000 + b".x",  # was int() of 10,000 digits: a 500
        b"fusee_session_1=\xb2.x",  # "²" is a digit to str.isdigit, not to int()
        b'fusee_session_1="' + b"\\" * 8_000 + b'"',  # http.cookies: quadratic
        b";" * 16_000,
        b"=" * 16_000,
    ):
        assert not server.allowed(header, "h:1")
        assert server.allowed(header + b"; " + issued, "h:1")
    assert logged_in(issued.decode(), "h:1") and not logged_in("a=1", "h:1")
    assert cookie_name("h:\xb2") == cookie_name("h:" + "9" * 10_000) == "fusee_session_default"


def test_the_cookie_s_flags() -> None:
    issued = Sessions().issue("h:1", secure=True)
    assert "; HttpOnly; SameSite=Strict; Secure" in issued
    assert "Secure" not in Sessions().issue("h:1", secure=False)
    assert clear_cookie("h:1").startswith("fusee_session_1=; Path=/; Max-Age=0")
