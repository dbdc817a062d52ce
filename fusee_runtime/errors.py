"""Errors a fusee user can meet, and `Failure`, the recorded shape of one.

Expected operating errors are typed exceptions derived from `FuseeError`.
A `Failure` is what the journal keeps of an exception raised by a step or a
workflow: its type name (`kind`), message, whether it may be retried, free
`details` and the failure that caused it. It is itself an exception, so a
step can `raise Failure(...)` to choose exactly what is recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import os
import traceback
from typing import Any

import orjson

MESSAGE_CHARS_MAX = 16_384
DETAILS_BYTES_MAX = 65_536
CAUSES_MAX = 8
TRACEBACK_CHARS_MAX = 8_192
"""The longest traceback a failure keeps: its end, where the error was raised."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"({len(text) - limit} characters cut)...{text[-limit:]}"


_OWN_FILES = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    # The machinery a step runs through: the thread pool and the event loop.
    os.path.dirname(concurrent.futures.__file__) + os.sep,
    os.path.dirname(asyncio.__file__) + os.sep,
)


def _traceback(exc: BaseException) -> str:
    """The traceback of `exc` (and the exceptions chained to it) as text, without
    the frames of fusee, its thread pool and its event loop: the user's code raised
    it, through the engine."""
    try:
        return _formatted(exc)
    except Exception as e:  # a failure is still recorded, without its traceback
        return f"(the traceback could not be formatted: {type(e).__name__})"


def _formatted(exc: BaseException) -> str:
    shown = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    te: traceback.TracebackException | None = shown
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        theirs = [f for f in te.stack if not f.filename.startswith(_OWN_FILES)]
        if theirs:
            te.stack = traceback.StackSummary.from_list(theirs)
        te = te.__cause__ or te.__context__
    return "".join(shown.format())


class FuseeError(Exception):
    """Base of every error fusee raises on purpose."""


class Failure(FuseeError):
    """A failure as recorded in the journal.

    Args:
        message: what went wrong, for people.
        kind: the type name of the error; defaults to `"Failure"`.
        retryable: `False` makes it final whatever the retry policy says.
        details: any JSON value that helps the caller.
        cause: the failure that caused this one.
        traceback: the Python traceback where it was raised, as text; `Failure.of`
            fills it in (bounded by `TRACEBACK_CHARS_MAX`, keeping the end).
    """

    def __init__(
        self,
        message: str,
        kind: str | None = None,
        retryable: bool = True,
        details: Any = None,
        cause: Failure | None = None,
        traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind or type(self).__name__
        self.retryable = retryable
        self.details = details
        self.cause = cause
        self.traceback = traceback
        # The live exception it was made from; never recorded, so only the
        # attempt that raised it can match classes against it.
        self.exception: BaseException | None = None

    def __repr__(self) -> str:
        return f"Failure(kind={self.kind!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.kind != "Failure" else self.message

    def chain(self) -> list[Failure]:
        """This failure and its causes, outermost first."""
        out: list[Failure] = []
        f: Failure | None = self
        while f is not None and len(out) < 32:
            out.append(f)
            f = f.cause
        return out

    def to_json(self, depth: int = 0) -> dict[str, Any]:
        """The recorded form, bounded: a failure always fits in a record.

        A message past `MESSAGE_CHARS_MAX` is cut, details that cannot be
        encoded or pass `DETAILS_BYTES_MAX` become their (cut) repr, and the
        cause chain stops after `CAUSES_MAX` links.
        """
        details = self.details
        if details is not None:
            try:
                size = len(orjson.dumps(details))
            except TypeError:
                details, size = repr(details), 0
            if size > DETAILS_BYTES_MAX or isinstance(details, str):
                details = _cut(str(details), DETAILS_BYTES_MAX // 4)
        cause = self.cause if depth < CAUSES_MAX else None
        out = {
            "kind": _cut(str(self.kind), 200),
            "message": _cut(str(self.message), MESSAGE_CHARS_MAX),
            "retryable": self.retryable,
            "details": details,
            "cause": cause.to_json(depth + 1) if cause is not None else None,
        }
        if self.traceback:
            out["traceback"] = _tail(str(self.traceback), TRACEBACK_CHARS_MAX)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Failure:
        cause = data.get("cause")
        return cls(
            data.get("message", ""),
            kind=data.get("kind"),
            retryable=bool(data.get("retryable", True)),
            details=data.get("details"),
            cause=cls.from_json(cause) if cause else None,
            traceback=data.get("traceback"),
        )

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        """The failure that records `exc`, following its cause chain, with its
        traceback (which shows the chained exceptions too)."""
        f = cls._of(exc)
        if f.traceback is None and exc.__traceback__ is not None:
            f.traceback = _traceback(exc)
        return f

    @classmethod
    def _of(cls, exc: BaseException) -> Failure:
        if isinstance(exc, Failure):
            if exc.exception is None:
                exc.exception = exc
            return exc
        cause: Failure | None = None
        if isinstance(exc, StepFailed | ChildFailed | RunFailed):
            cause = exc.failure
        else:
            inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
            if inner is not None and inner is not exc:
                cause = cls._of(inner)
        f = cls(str(exc) or type(exc).__name__, kind=type(exc).__name__, cause=cause)
        if isinstance(exc, FuseeError) and not isinstance(exc, StepFailed):
            f.retryable = not isinstance(exc, CodecError | Rejected | NonDeterminism)
        f.exception = exc
        return f


class Fatal(Failure):
    """A failure that is never retried."""

    def __init__(self, message: str, details: Any = None) -> None:
        # The kind is the type name: "Fatal", or a subclass's own name.
        super().__init__(message, retryable=False, details=details)


class StepFailed(FuseeError):
    """A step failed for good; raised in workflow code where it was awaited."""

    def __init__(self, name: str, failure: Failure) -> None:
        super().__init__(f"step {name!r} failed: {failure}")
        self.name = name
        self.failure = failure


class ChildFailed(FuseeError):
    """A child workflow did not complete; `.status` says how it closed, `.failure` why.

    Raised in a parent by `ctx.child` (and a child handle's `result()`) when
    its child fails, is cancelled, terminated, reset or times out (`.status`:
    "failed", "cancelled", "terminated", "reset", "timed_out"). The parent
    may catch it, compensate and go on.
    """

    def __init__(self, id: str, failure: Failure, status: str = "failed") -> None:
        said = "failed" if status == "failed" else f"closed as {status}"
        super().__init__(f"child {id!r} {said}: {failure}")
        self.id = id
        self.failure = failure
        self.status = status


class RunFailed(FuseeError):
    """The run ended with a failure; `.failure` says which."""

    def __init__(self, id: str, failure: Failure) -> None:
        super().__init__(f"run {id!r} failed: {failure}")
        self.id = id
        self.failure = failure


class Cancelled(FuseeError):
    """The run was cancelled."""


class TimedOut(FuseeError, TimeoutError):
    """A deadline passed: the run's own, or a caller's wait."""


class Terminated(FuseeError):
    """The run was terminated."""


class NonDeterminism(FuseeError):
    """Replay found code asking for another operation than the journal holds.

    Never raised into workflow code: a replay mismatch stops the run with
    status `stuck` and a message naming both operations (`RunInfo.error`),
    and `resume` retries the replay with the code loaded then. Nothing in
    fusee raises it today; it is the error of the replay checker to come
    (`fusee replay` and the test kit's `replay`, issue 19), and a control
    client raises it by name if the home's owner answers with it.
    """


class NotFound(FuseeError):
    """No run, workflow or token by that name."""


class Rejected(FuseeError):
    """The call is not allowed in this state; the message says why."""


class IdConflict(Rejected):
    """The workflow id has a run that the call conflicts with: it exists and the call
    said `on_conflict="fail"`, or it is a run of another workflow (HTTP 409)."""


class EngineClosed(Rejected):
    """The engine closed while the caller waited; the run goes on when the home opens again."""


class UpdatePending(Rejected):
    """An update was accepted (recorded), and the engine stopped before its handler was
    applied: it is applied when the run's code runs again. Sent again with its update id,
    it is not applied twice, and answers once applied."""


class CodecError(FuseeError):
    """A value cannot be encoded as JSON (or is over the size limit)."""


class JournalCorrupt(FuseeError):
    """The journal is damaged before its tail; names the segment and offset (or, in
    PostgreSQL, the table and record, with no offset)."""

    def __init__(self, path: str, offset: int | None, reason: str) -> None:
        at = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"journal corrupt in {path}{at}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class HistoryDamaged(FuseeError):
    """The history store (`<home>/history.db`) cannot be read; the message names it and
    says what to do.

    The home opens all the same: open runs live in the journal and go on, and
    closed runs that cannot be moved to the store stay in memory and in the
    checkpoints. Only what needs the closed runs the store holds raises it:
    `list` and `history` (closed runs included), `prune`, and a lookup of an
    id that is not in memory (`describe`, `result`, `start` with an `id`).
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class JournalFailed(FuseeError):
    """A write or fdatasync failed; the engine stopped accepting work."""


class StoreUnavailable(FuseeError):
    """The journal's store (`Config.store`: PostgreSQL) cannot be reached or used: the
    message names it (never its password) and says what the database answered."""


class HomeLocked(FuseeError):
    """Another process owns the home."""

    def __init__(self, home: str, pid: int | None, who: str | None = None) -> None:
        who = who or (f"process {pid}" if pid else "another process")
        super().__init__(f"home {home} is locked by {who}")
        self.home = home
        self.pid = pid


class HomeUnsafe(FuseeError, PermissionError):
    """The home could be turned against its user, so nothing in it is opened: it is not
    this account's, or other accounts may write to it, or a symbolic link (or a file of
    another account) sits where fusee keeps a file of its own. An `OSError` too, as a
    home that cannot be a directory of ours is (the CLI exits 2).

    `path` is what was refused (the home, or the file in it); `reason` says why and
    what to do.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(errno.EPERM, reason, path)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class HistoryInvalid(Rejected):
    """A history document (`fusee history ID --export FILE`) that `replay` and `fusee
    replay --history` refuse before replaying any of it: unreadable, over the size
    read, not JSON, not a fusee history, or breaking a rule of its format
    (`fusee_runtime.history_doc`). The message says which in one line, and at
    which record; `path` is the file (None for a document passed as a mapping)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path
