"""Where code runs, and the small names every room shares.

Three kinds of code run inside a run, and each behaves differently when it
calls fusee: workflow code (every operation is journaled and replayed), a
step function (an ordinary call: `@step` calls run plainly, `ctx.now()` is
the clock) and a query or update handler (records nothing). Context
variables tell them apart:

- `execution_var`: the execution of a run's code that this task (or a step
  thread, which gets a copy of the context) belongs to;
- `step_var`: the step whose function runs now (`ctx.key()`, `ctx.log`);
- `handling_var`: a query or update handler runs now;
- `cursor_var`: the branch of a `ctx.all`/`ctx.race` that numbers the
  operations this task asks for.

This module is a leaf: it imports nothing of fusee's but the errors, so the
decorators, the context, the step runner, streams and the run log all read
it without importing each other.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, NamedTuple

from fusee_runtime.errors import Rejected

if TYPE_CHECKING:
    from fusee_runtime.context import Ctx
    from fusee_runtime.execution import Execution

NAME_CHARS_MAX = 200
"""Longest name of a step, timer, signal, stream or handler; every record of the op repeats it."""
ID_BYTES_MAX = 256
"""Longest workflow id, in UTF-8 bytes."""
_ID_BAD = re.compile(r"[\x00-\x1f\x7f/]")
_ID_DOTS = frozenset({".", ".."})


class Halt(BaseException):
    """Stops a run's code without recording anything (stuck, closing, replaced).

    A BaseException so that workflow code's `except Exception` cannot swallow it.
    """


class JournalEnds(Halt):
    """The replay checker's code got where its run's journal ends: from operation
    `seq` (`kind` `name`) on it would run live."""

    def __init__(self, seq: str, kind: str, name: str) -> None:
        super().__init__(f"the journal ends before operation #{seq} ({kind} {name!r})")
        self.seq, self.kind, self.name = seq, kind, name


class GivenUp(Halt):
    """The replay checker's code waits for operation `seq`, which the journal gave up
    (a branch its `ctx.all` or `ctx.race` moved on from, and cancelled)."""

    def __init__(self, seq: str) -> None:
        super().__init__(f"the journal gave up operation #{seq}")
        self.seq = seq


class Running(NamedTuple):
    """The step whose function runs: its seq (for `ctx.key()`), name and attempt (`ctx.log`)."""

    seq: str
    name: str
    attempt: int


class Cursor:
    """Numbers the operations of one branch of code: "1", "2", ... or "3.0.1", ..."""

    __slots__ = ("n", "prefix")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0


execution_var: ContextVar[Execution | None] = ContextVar("fusee_execution", default=None)
step_var: ContextVar[Running | None] = ContextVar("fusee_step", default=None)
handling_var: ContextVar[bool] = ContextVar("fusee_handling", default=False)
cursor_var: ContextVar[Cursor | None] = ContextVar("fusee_cursor", default=None)


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Marks a query or update handler running: `ctx` records nothing from inside it."""
    token = handling_var.set(True)
    try:
        yield
    finally:
        handling_var.reset(token)


def journaling() -> Execution | None:
    """The execution a `@step` call journals into: workflow code, not a step function."""
    execution = execution_var.get()
    if execution is None or step_var.get() is not None:
        return None
    return execution


def current_ctx() -> Ctx:
    """The `Ctx` of the running workflow or step function.

    Raises:
        Rejected: called outside workflow code and step functions.
    """
    execution = execution_var.get()
    if execution is None:
        raise Rejected("current_ctx() is only available in workflow code or a step function")
    return execution.ctx


def check_name(kind: str, name: str) -> str:
    """A name of `kind` ("signal", "stream", ...) as given, or `Rejected` saying what is
    wrong with it."""
    if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
        article = "an" if kind[:1] in "aeiou" else "a"
        raise Rejected(f"{article} {kind} name is a string of 1 to {NAME_CHARS_MAX} characters")
    return name


def check_id(id: str, *, existing: bool = False) -> str:
    """A workflow id as given, or `Rejected` saying what is wrong with it.

    `.` and `..` are refused: browsers and most HTTP clients resolve `/runs/..` as a path
    before sending it, so such a run could be neither opened in the web UI nor reached
    under `/v1/runs/`. With `existing` (an id looked up, not given to a new run) they
    pass: a version before this refusal may have started runs with them.
    """
    if not isinstance(id, str) or not id:
        raise Rejected("a workflow id is a non-empty string")
    if len(id.encode()) > ID_BYTES_MAX:
        raise Rejected(f"a workflow id is at most {ID_BYTES_MAX} bytes")
    if _ID_BAD.search(id):
        raise Rejected(f"a workflow id may not contain '/' or control characters: {id!r}")
    if id in _ID_DOTS and not existing:
        raise Rejected(f"a workflow id may not be '.' or '..' (URLs resolve them as paths): {id!r}")
    return id


_RANDOM = threading.Lock()
_UUID4 = uuid.uuid4
_random_pool = b""
_random_at = 0


def fresh_id() -> str:
    """A new random id, as `uuid.uuid4().hex` gives (32 hex digits, version 4), drawn
    from the OS's randomness 256 ids at a time: one `getrandom` call per id was a few
    microseconds of every start. A forked child draws afresh (`os.register_at_fork`).
    Where `uuid.uuid4` was replaced (the golden journals' plays seed it, so that each
    play writes the same bytes), the id is its."""
    global _random_pool, _random_at
    if uuid.uuid4 is not _UUID4:
        return uuid.uuid4().hex
    with _RANDOM:
        at = _random_at
        if at + 16 > len(_random_pool):
            _random_pool, at = os.urandom(4096), 0
        _random_at = at + 16
        b = bytearray(_random_pool[at : at + 16])
    b[6] = b[6] & 0x0F | 0x40  # version 4
    b[8] = b[8] & 0x3F | 0x80  # RFC 4122 variant
    return b.hex()


def _forked() -> None:
    global _RANDOM, _random_pool, _random_at
    _RANDOM = threading.Lock()  # (a thread of the parent may have held it at the fork)
    _random_pool, _random_at = b"", 0


os.register_at_fork(after_in_child=_forked)
