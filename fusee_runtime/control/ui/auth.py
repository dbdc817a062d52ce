"""The web UI's login: the server's token, asked once, kept in a cookie.

A browser cannot add `Authorization: Bearer <token>` to the pages it
loads, so with `--token` the UI asks for the token once (`/login`) and
sets a cookie that `http._Auth` accepts as it accepts the header
(`Sessions`):

- the cookie holds when it expires and an HMAC of that under a key this
  server made when it started, not the token: it is good for this server
  only, until it expires or the server stops (which logs every browser
  out), and the token never has to fit a cookie's characters;
- its name carries the port the browser reached the server on: browsers
  keep cookies by host, not by port, so two servers on one host (or any
  other service there) would otherwise see and replace each other's;
- `HttpOnly`, so no script reads it; `SameSite=Strict`, so a page of
  another site cannot make the browser send it (and `_Browsers` refuses
  such a page's requests anyway); `Secure` when the page came over HTTPS
  (`--public-url https://...` behind a proxy).

Without a token there is no login: loopback alone is answered.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from http.cookies import SimpleCookie

COOKIE = "fusee_session"
"""The start of the cookie's name (`_<port>` follows)."""
COOKIE_MAX_AGE_S = 7 * 24 * 3600
"""How long a login lasts."""


def matches(given: str, token: str) -> bool:
    """Whether `given` is the server's token (compared in constant time)."""
    return hmac.compare_digest(given.encode(), token.encode())


def cookie_name(host: str | None) -> str:
    """The cookie's name for requests that came with this `Host` header."""
    port = host.rpartition(":")[2] if host and not host.endswith("]") else ""
    return f"{COOKIE}_{port if port.isdigit() else 'default'}"


class Sessions:
    """The logins of one server: cookies it signed, with a key of its own."""

    def __init__(self) -> None:
        self._key = os.urandom(32)

    def issue(self, host: str | None, secure: bool, now: float | None = None) -> str:
        """The `Set-Cookie` header that logs a browser in."""
        expires = int(now if now is not None else time.time()) + COOKIE_MAX_AGE_S
        flags = "; Secure" if secure else ""
        return (
            f"{cookie_name(host)}={expires}.{self._sign(expires)}; Path=/; "
            f"Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; SameSite=Strict{flags}"
        )

    def allowed(self, header: bytes, host: str | None, now: float | None = None) -> bool:
        """Whether a `Cookie` header carries a login of this server, not expired."""
        value = _cookie(header, cookie_name(host))
        expires, _, signature = (value or "").partition(".")
        if not expires.isdigit() or not hmac.compare_digest(
            signature.encode(), self._sign(int(expires)).encode()
        ):
            return False
        return int(expires) > (now if now is not None else time.time())

    def _sign(self, expires: int) -> str:
        return hmac.new(self._key, str(expires).encode(), hashlib.sha256).hexdigest()


def logged_in(cookies: dict[str, str], host: str | None) -> bool:
    """Whether the browser holds a login cookie here (to show the log-out button)."""
    return cookie_name(host) in cookies


def clear_cookie(host: str | None) -> str:
    """The `Set-Cookie` header that logs a browser out."""
    return f"{cookie_name(host)}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"


def _cookie(header: bytes, name: str) -> str | None:
    """The value of cookie `name` in a `Cookie` header, or None."""
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header.decode("latin-1"))
    except Exception:  # a malformed header from a client: no session, not a 500
        return None
    morsel = cookies.get(name)
    return morsel.value if morsel is not None else None
