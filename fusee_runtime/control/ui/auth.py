"""The web UI's login: the server's token, asked once, kept in a cookie.

A browser cannot add `Authorization: Bearer <token>` to the pages it
loads, so with `--token` the UI asks for the token once (`/login`) and
sets a cookie that `http._Auth` accepts as it accepts the header
(`Sessions`):

- the cookie holds a random session id, not the token, and the server
  keeps the logins it issued in memory (`Sessions`): a login lasts until it
  expires, its browser logs out (`/logout` forgets it, so the same cookie
  sent again is refused), or the server stops (which logs every browser
  out); at most `SESSIONS_MAX` are kept, and past that the oldest is
  logged out;
- its name carries the port the browser reached the server on: browsers
  keep cookies by host, not by port, so two servers on one host (or any
  other service there) would otherwise see and replace each other's;
- `HttpOnly`, so no script reads it; `SameSite=Strict`, so a page of
  another site cannot make the browser send it (and `_Browsers` refuses
  such a page's requests anyway); `Secure` when the page came over HTTPS
  (`--public-url https://...` behind a proxy).

Every request without the API's token has its `Cookie` header read here,
before anyone is known, so that read is one pass over the header
(`_cookies`): `http.cookies` unquotes a value in time that grows with the
square of its backslashes (a second of the engine's loop for a header of
16 KiB, the most the server takes, on Python 3.11.7), and nothing in it is
turned into a number (`int()` refuses over 4,300 digits).

Without a token there is no login: loopback alone is answered.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

COOKIE = "fusee_session"
"""The start of the cookie's name (`_<port>` follows)."""
COOKIE_MAX_AGE_S = 7 * 24 * 3600
"""How long a login lasts."""
SESSIONS_MAX = 10_000
"""The most logins a server keeps; a new one past it logs the oldest out."""
SESSION_BYTES = 32
"""The random bytes of a session id."""


def matches(given: str, token: str) -> bool:
    """Whether `given` is the server's token (compared in constant time)."""
    return hmac.compare_digest(given.encode(), token.encode())


def cookie_name(host: str | None) -> str:
    """The cookie's name for requests that came with this `Host` header."""
    port = host.rpartition(":")[2] if host and not host.endswith("]") else ""
    known = port.isascii() and port.isdigit() and len(port) <= 5
    return f"{COOKIE}_{port if known else 'default'}"


class Sessions:
    """The logins of one server, in its memory; used on the server's loop only."""

    def __init__(self) -> None:
        # A session id's SHA-256, not the id: a lookup's timing then tells nothing
        # about the ids held. Oldest first, as dicts keep insertion order.
        self._expires_at_s: dict[bytes, float] = {}

    def issue(self, host: str | None, secure: bool, now: float | None = None) -> str:
        """The `Set-Cookie` header that logs a browser in (a new session)."""
        now_s = now if now is not None else time.time()
        while self._expires_at_s:
            oldest, expires_at_s = next(iter(self._expires_at_s.items()))
            if expires_at_s > now_s and len(self._expires_at_s) < SESSIONS_MAX:
                break
            del self._expires_at_s[oldest]  # expired, or the oldest when full
        session = secrets.token_urlsafe(SESSION_BYTES)
        self._expires_at_s[_digest(session)] = now_s + COOKIE_MAX_AGE_S
        flags = "; Secure" if secure else ""
        return (
            f"{cookie_name(host)}={session}; Path=/; "
            f"Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; SameSite=Strict{flags}"
        )

    def allowed(self, header: bytes, host: str | None, now: float | None = None) -> bool:
        """Whether a `Cookie` header (as it came) carries a login of this server, not
        expired nor ended."""
        now_s = now if now is not None else time.time()
        for value in _cookies(header.decode("latin-1"), cookie_name(host)):
            digest = _digest(value)
            expires_at_s = self._expires_at_s.get(digest)
            if expires_at_s is None:
                continue
            if expires_at_s > now_s:
                return True
            del self._expires_at_s[digest]
        return False

    def end(self, header: str, host: str | None) -> None:
        """Forgets the logins a `Cookie` header carries: the browser logged out."""
        for value in _cookies(header, cookie_name(host)):
            self._expires_at_s.pop(_digest(value), None)

    def __len__(self) -> int:
        """How many logins are kept (expired ones included until they are next seen)."""
        return len(self._expires_at_s)


def logged_in(header: str, host: str | None) -> bool:
    """Whether the browser holds a login cookie here (to show the log-out button)."""
    return bool(_cookies(header, cookie_name(host)))


def clear_cookie(host: str | None) -> str:
    """The `Set-Cookie` header that logs a browser out."""
    return f"{cookie_name(host)}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"


def _cookies(header: str, name: str) -> list[str]:
    """The values of the cookies called `name` in a `Cookie` header (`a=1; b=2`, RFC
    6265), in one pass: whatever a client sends, no error and no quadratic time."""
    out = []
    for pair in header.split(";"):
        key, equals, value = pair.partition("=")
        if equals and key.strip() == name:
            out.append(value.strip())
    return out


def _digest(session: str) -> bytes:
    return hashlib.sha256(session.encode("utf-8", "surrogatepass")).digest()
