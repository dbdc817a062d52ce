"""Completion tokens: how work outside a workflow finishes an `await_completion` step.

A token names the run, the operation and which of its tokens it is, and
carries a MAC under the home's secret (`<home>/secret`, created 0600 when
the first token is issued), so only a token this home issued is taken, and
a token that a later one replaced (`send` retried, or run again after a
resume) is refused. Tokens are recomputed, never stored: the journal
records only that an attempt issued one. So is the token a run waits on now
(`Tokens.awaited`, what `fusee describe` and `GET /v1/runs/{id}/completions`
show): the current one of each `await_completion`, never one it replaced.

A paused `await_completion` (its `send` ran out of attempts under
`Exhausted.PAUSE`) has no current token: it waits for `resume`, whose fresh
attempt issues a new one. Until that token is recorded (a resume is durable
before it, and a crash can fall in between) the last token is refused too,
as the resume already replaced it (`current_token`): a step is finished from
outside only while it waits for a token, never while it shows as paused nor
once its next `send` is on its way.

The secret is written under a name no other account can guess and linked
in place, and read only if it is no symbolic link and this account's
(`journal/safefiles.py`): nobody else can choose it, nor have it written
where they can read it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fusee_runtime.errors import NotFound, Rejected
from fusee_runtime.journal.safefiles import create_new, nofollow, temp_name
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.ops import CompletionOp

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run

SECRET_NAME = "secret"
SECRET_BYTES = 32
_TOKEN = re.compile(r"([0-9a-f]{32})-([0-9.]{1,200})-([0-9]{1,9})-([0-9a-f]{32})")


@dataclass(frozen=True)
class Completion:
    """What `ctx.await_completion`'s `send` gets: the token that finishes this attempt
    (`engine.complete(token, value)`, `fusee complete TOKEN VALUE`), and the URL that
    does it over HTTP when `fusee serve --http` runs (`POST` the value as JSON; the
    same path under `/v1/fail/` fails it), else None."""

    token: str
    url: str | None = None


@dataclass(frozen=True)
class Awaited:
    """An `await_completion` that an open run waits for, with the token that finishes it
    now (`Engine.completions`)."""

    step: str
    """The step's name (`ctx.await_completion(name, send)`)."""
    op: str
    """Its operation's position in the run: "3", or "3.0.1" inside `ctx.all`."""
    completion: Completion
    """Its current token, and the URL that completes it when the HTTP API serves."""


def home_secret(home: Path, storage: Storage) -> bytes:
    """The home's token secret, created (0600, synced) the first time.

    Raises:
        Rejected: the secret cannot be read, or is not one (a directory, a
            file of another size): the message names it and what to do.
    """
    path = home / SECRET_NAME
    with contextlib.suppress(FileNotFoundError):
        return _read_secret(path)
    fresh = temp_name(path)
    fd = create_new(fresh)
    try:
        storage.write(fd, 0, secrets.token_bytes(SECRET_BYTES))
        storage.sync(fd)
    finally:
        storage.close(fd)
    try:
        os.link(fresh, path)  # fails if another process made one first: theirs wins
    except FileExistsError:
        pass
    finally:
        os.unlink(fresh)
    storage.sync_dir(home)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    """The secret in `path` (FileNotFoundError when there is none yet)."""
    try:
        with open(path, "rb", opener=nofollow) as f:
            secret = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        reason = "it is a directory" if isinstance(e, IsADirectoryError) else e.strerror or e
        raise _unusable(path, str(reason)) from None
    # It is written whole before it is linked in place: another size is damage, and a
    # short key would make tokens easy to forge.
    if len(secret) != SECRET_BYTES:
        raise _unusable(path, f"it holds {len(secret)} bytes, not {SECRET_BYTES}")
    return secret


def _unusable(path: Path, reason: str) -> Rejected:
    return Rejected(
        f"the home's token secret {path} cannot be used ({reason}): completion tokens "
        "cannot be issued or checked. With the home closed, move it aside: the next token "
        "makes a new one, and tokens issued with the old one no longer work"
    )


def current_token(op: CompletionOp) -> int | None:
    """The number of the token that finishes `op` now (`complete` takes it), or None
    when none does: `op` finished, is paused (it waits for `resume`), or was resumed
    and its next attempt has not issued its token yet (none before it counts)."""
    # `attempt` is 0 from a resume until the next CompletionIssued (fold), and before
    # the first token.
    if op.done or op.paused or op.attempt == 0 or not op.issued:
        return None
    return op.issued


def make_token(secret: bytes, run_id: str, seq: str, issued: int) -> str:
    body = f"{run_id}-{seq}-{issued}"
    return f"{body}-{_mac(secret, body)}"


def read_token(secret: bytes, token: str) -> tuple[str, str, int]:
    """The run, the operation and the number of the token (1 for its first) a token names.

    Raises:
        NotFound: not a token this home issued.
    """
    m = _TOKEN.fullmatch(token) if isinstance(token, str) else None
    if m is None or not hmac.compare_digest(m[4], _mac(secret, f"{m[1]}-{m[2]}-{m[3]}")):
        raise NotFound(f"{str(token)[:80]!r} is not a completion token of this home")
    return m[1], m[2], int(m[3])


def _mac(secret: bytes, body: str) -> str:
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()[:32]


class Tokens:
    """The completion tokens of a home: issued for an `await_completion`, read back."""

    def __init__(self, home: Path, storage: Storage, http_url: str | None) -> None:
        self.home = home
        self.storage = storage
        self.http_url = http_url
        self._secret: bytes | None = None
        self.shared: bytes | None = None
        """The secret the journal's store keeps (PostgreSQL), used instead of the home's."""

    def secret(self, create: bool) -> bytes | None:
        """The home's token secret; made (once per home) when the first token is issued."""
        if self.shared is not None:
            return self.shared
        if self._secret is None:
            path = self.home / SECRET_NAME
            if create or os.path.lexists(path):
                self._secret = home_secret(self.home, self.storage)
        return self._secret

    def issue(self, run: Run, seq: str, issued: int) -> Completion:
        """What `send` gets for the `issued`-th token of an `await_completion`."""
        secret = self.secret(create=True)
        assert secret is not None
        return self._completion(secret, run.run_id, seq, issued)

    def awaited(self, run: Run) -> list[Awaited]:
        """The `await_completion`s open `run` waits for (a `completion` in its `waiting`),
        in the order they began, each with its current token (`current_token`): the one
        `complete` takes now. A token a later one replaced is not there, nor is one for a
        paused step, or a resumed one whose new token is not issued yet (it waits for
        `resume`, which issues a new one). The secret is read, never made: with none
        (moved aside), no token is good, and the list is empty."""
        if not run.is_open:
            return []
        waiting = [
            (seq, op.name, issued)
            for seq, op in run.pending.items()
            if isinstance(op, CompletionOp) and (issued := current_token(op)) is not None
        ]
        secret = self.secret(create=False) if waiting else None
        if secret is None:
            return []
        return [
            Awaited(name, seq, self._completion(secret, run.run_id, seq, issued))
            for seq, name, issued in waiting
        ]

    def _completion(self, secret: bytes, run_id: str, seq: str, issued: int) -> Completion:
        token = make_token(secret, run_id, seq, issued)
        url = f"{self.http_url}/v1/complete/{token}" if self.http_url else None
        return Completion(token, url)
