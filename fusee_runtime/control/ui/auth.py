"""The web UI's login: the server's token, asked once, kept in a cookie.

A browser cannot add `Authorization: Bearer <token>` to the pages it
loads, so with `--token` the UI asks for the token once (`/login`) and
sets a cookie that `http._Auth` accepts as it accepts the header:

- the cookie holds `cookie_value(token)`, an HMAC of the token, not the
  token: what a page's cookie jar holds is good for this server only, and
  the token never has to fit a cookie's characters;
- `HttpOnly`, so no script reads it; `SameSite=Strict`, so a page of
  another site cannot make the browser send it (and `_Browsers` refuses
  such a page's requests anyway); `Secure` when the page came over HTTPS.

Without a token there is no login: loopback alone is answered.
"""

from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie

COOKIE = "fusee_session"
"""The cookie's name."""
COOKIE_MAX_AGE_S = 30 * 24 * 3600
"""How long a browser keeps the cookie."""


def cookie_value(token: str) -> str:
    """What the cookie holds for `token`."""
    return hmac.new(token.encode(), b"fusee web ui session", hashlib.sha256).hexdigest()


def cookie_of(header: bytes) -> bytes | None:
    """The session cookie's value in a `Cookie` header, or None."""
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header.decode("latin-1"))
    except Exception:  # a malformed header from a client: no session, not a 500
        return None
    morsel = cookies.get(COOKIE)
    return morsel.value.encode("latin-1") if morsel is not None else None


def matches(given: str, token: str) -> bool:
    """Whether `given` is the server's token (compared in constant time)."""
    return hmac.compare_digest(given.encode(), token.encode())


def allowed(header: bytes, token: str) -> bool:
    """Whether a `Cookie` header carries the session cookie of `token`."""
    given = cookie_of(header)
    return given is not None and hmac.compare_digest(given, cookie_value(token).encode())


def set_cookie(token: str, secure: bool) -> str:
    """The `Set-Cookie` header that logs a browser in."""
    flags = "; Secure" if secure else ""
    return (
        f"{COOKIE}={cookie_value(token)}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; "
        f"HttpOnly; SameSite=Strict{flags}"
    )


def clear_cookie() -> str:
    """The `Set-Cookie` header that logs a browser out."""
    return f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
