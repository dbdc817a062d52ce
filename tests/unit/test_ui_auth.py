"""The web UI's logins (`control/ui/auth.py`): a cookie this server signed, for the port
the browser reached it on, until it expires."""

from __future__ import annotations

from fusee_runtime.control.ui.auth import COOKIE_MAX_AGE_S, Sessions, clear_cookie, cookie_name


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
    name, _, value = issued.partition(b"=")
    expires, _, signature = value.partition(b".")
    longer = name + b"=" + str(int(expires) + 10**6).encode() + b"." + signature
    assert not server.allowed(longer, "h:1", now=1001)
    assert not server.allowed(b"fusee_session_1=garbage", "h:1", now=1001)
    assert not server.allowed(b"\xff\x00;;=", "h:1", now=1001)


def test_the_cookie_s_flags() -> None:
    issued = Sessions().issue("h:1", secure=True)
    assert "; HttpOnly; SameSite=Strict; Secure" in issued
    assert "Secure" not in Sessions().issue("h:1", secure=False)
    assert clear_cookie("h:1").startswith("fusee_session_1=; Path=/; Max-Age=0")
