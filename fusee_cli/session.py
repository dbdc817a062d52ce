"""What every command shares: exit codes, one-line errors, input, opening the home.

A command checks everything it can before it opens the home (the input
file, the app module, the workflow name, the id), so bad input never
touches the journal. Expected errors travel as `CliError` and leave as one
line on stderr and an exit code; a traceback means a bug.

The engine (and asyncio, and orjson) are imported inside the functions
that need them, never at module level: `fusee --help` must not pay for them.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

if TYPE_CHECKING:
    from json import JSONDecodeError

    from fusee_runtime import Engine, RunInfo
    from fusee_runtime.control.client import ControlApi

T = TypeVar("T")


class Code(enum.IntEnum):
    """The exit codes of DESIGN.md."""

    OK = 0
    FAILED = 1
    """The workflow failed or was cancelled, or it is stuck or paused."""
    USAGE = 2
    """A usage or input error; nothing was recorded."""
    NOT_FOUND = 3
    """No run with that id."""
    TIMED_OUT = 4
    """The wait for a result ran out."""


class CliError(Exception):
    """An expected error: one line for people and the exit code that goes with it."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Locked(CliError):
    """Another process owns the home (or drives the journal in the store)."""


def not_available(what: str, missing: str) -> CliError:
    """The error of a command (or option) whose engine feature is not built yet: exit 2."""
    return CliError(
        Code.USAGE, f"fusee {what} is not available yet: workflows cannot {missing} in this version"
    )


def echo_err(message: str) -> None:
    """Prints a status line on stderr (status never goes to stdout)."""
    typer.echo(message, err=True)


def error(message: str) -> None:
    """Prints an error as exactly one line on stderr."""
    echo_err("error: " + " ".join(message.splitlines()))


@contextlib.contextmanager
def reporting() -> Iterator[None]:
    """Turns an expected error raised inside into its line on stderr and its exit code.

    Commands raise `CliError`; an engine error that reaches this far (a
    journal that failed under the command, say) gets the code of its kind.
    """
    try:
        yield
    except CliError as e:
        error(e.message)
        raise typer.Exit(e.code) from None
    except Exception as e:
        code = _code_of(e)
        if code is None:
            raise
        error(said(e))
        raise typer.Exit(code) from None


APP_HINT = (
    "; the app is the module that registers the workflows: --app MODULE, FUSEE_APP, "
    'or app = "MODULE" under [tool.fusee] in ./pyproject.toml (default: workflows, '
    "from the current directory)"
)


def said(e: Exception) -> str:
    """An engine error's line: its message, and for an app module that is not there at
    all, where the app is named (the default one is looked for in the current
    directory only, so outside a project that is the usual cause)."""
    from fusee_runtime.engine.registry import AppImportError  # (imported: `e` is its)

    if isinstance(e, AppImportError) and e.missing:
        return f"{e}{APP_HINT}"
    return str(e)


def _code_of(e: Exception) -> Code | None:
    """The exit code of an engine error, or None for anything else (a bug)."""
    if "fusee_runtime" not in sys.modules:
        return None
    from fusee_runtime import (
        CodecError,
        FuseeError,
        HomeLocked,
        JournalCorrupt,
        NotFound,
        Rejected,
        TimedOut,
    )
    from fusee_runtime.engine.registry import AppImportError
    from fusee_runtime.errors import HistoryDamaged, HomeUnsafe, StoreUnavailable

    if isinstance(
        e,
        AppImportError
        | CodecError
        | HistoryDamaged
        | HomeLocked
        | HomeUnsafe
        | JournalCorrupt
        | Rejected
        | StoreUnavailable,
    ):
        return Code.USAGE
    if isinstance(e, NotFound):
        return Code.NOT_FOUND
    if isinstance(e, TimedOut):
        return Code.TIMED_OUT
    return Code.FAILED if isinstance(e, FuseeError) else None


def run(main: Coroutine[Any, Any, None]) -> None:
    """Runs a command's coroutine on a fresh event loop."""
    import asyncio

    asyncio.run(main)


def print_json(value: Any) -> None:
    """Prints one JSON document on stdout."""
    import orjson

    typer.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


SHOWN_ARG_CHARS_MAX = 240
"""Longest argument quoted in an error line."""


def load_input(path: str | None, *, inline: bool = False) -> Any:
    """The input: the JSON in file `path` (`-` is stdin), or None without one.

    With `inline`, a `path` that names no file is read as JSON text itself
    (`--input '{"id": "o-2"}'`); an existing file always wins.

    Raises:
        CliError: the file is missing (with `inline`: and the text is not JSON
            either) or unreadable, or not JSON (with line and column).
    """
    import orjson

    if path is None:
        return None
    where = "on stdin" if path == "-" else f"file {path}"
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except (OSError, ValueError) as e:
        if inline and path != "-" and _names_no_file(e):
            return _inline_json(path)
        if isinstance(e, FileNotFoundError):
            raise CliError(Code.USAGE, f"input file {path} does not exist") from None
        strerror = e.strerror if isinstance(e, OSError) else None
        raise CliError(Code.USAGE, f"cannot read input {where}: {strerror or e}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise CliError(Code.USAGE, f"input {where} is not JSON: {_position(e)}") from None


def _names_no_file(e: OSError | ValueError) -> bool:
    """Whether reading failed because the argument names no file at all, so it may be
    JSON text: no such path, too long for a name, a component that is a file, a NUL byte."""
    import errno

    if isinstance(e, ValueError):  # "embedded null byte"
        return True
    return e.errno in (errno.ENOENT, errno.ENAMETOOLONG, errno.ENOTDIR)


def _inline_json(text: str) -> Any:
    """`--input` given as JSON text, once it names no file.

    Raises:
        CliError: not JSON either; the line says both.
    """
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise CliError(
            Code.USAGE,
            f"input {_cut(text)!r} names no file (it does not exist) "
            f"and is not JSON text either: {_position(e)}",
        ) from None


def _cut(text: str) -> str:
    """An argument as an error line shows it: at most `SHOWN_ARG_CHARS_MAX` characters."""
    return text if len(text) <= SHOWN_ARG_CHARS_MAX else text[: SHOWN_ARG_CHARS_MAX - 1] + "…"


def _position(e: JSONDecodeError) -> str:
    """A JSON parser's complaint and where it is."""
    return f"{e.msg} (line {e.lineno}, column {e.colno})"


LOOKS_LIKE_JSON = ("{", "[", '"')
"""How a VALUE meant as JSON starts: one that then does not parse is a mistake, not a string."""


def json_or_string(value: str | None) -> tuple[Any, bool]:
    """A VALUE argument parsed as JSON, else taken as a string (then the flag is True).

    A plain word (`approve`) is a string; a value that starts like JSON (an
    object, an array or a string) but does not parse is an error, not a string.

    Raises:
        CliError: VALUE starts like JSON but is not JSON (with line and column).
    """
    import orjson

    if value is None:
        return None, False
    try:
        return orjson.loads(value), False
    except orjson.JSONDecodeError as e:
        if value.lstrip().startswith(LOOKS_LIKE_JSON):
            raise CliError(
                Code.USAGE,
                f"{_cut(value)!r} starts like JSON but is not JSON: {_position(e)}; "
                "to send it as text, give it as a JSON string",
            ) from None
        return value, True


def check_depth(value: Any, what: str = "the input") -> None:
    """Refuses a value (`what`) nested deeper than the engine records
    (`fusee_runtime.journal.records.PAYLOAD_DEPTH_MAX`), saying how deep it is.

    It walks the value with a stack of its own, not by recursion (Python's
    recursion limit is what a deep value must not reach), holding one
    iterator per level it is in.

    Raises:
        CliError: the value is nested too deeply.
    """
    from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX

    stack, depth = [iter([value])], 0
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict | list):
                stack.append(iter(item.values() if isinstance(item, dict) else item))
                depth = max(depth, len(stack) - 1)
                break
        else:
            stack.pop()
    if depth > PAYLOAD_DEPTH_MAX:
        raise CliError(
            Code.USAGE,
            f"{what} is nested {depth} levels deep (arrays and objects within each other), "
            f"over the limit of {PAYLOAD_DEPTH_MAX}",
        )


def check_payload(value: Any, what: str = "the input") -> None:
    """Refuses an input the engine would refuse, before any home is opened.

    Raises:
        CliError: the input (`what`) is nested too deeply (`check_depth`), or
            over the engine's payload limit.
    """
    import orjson

    from fusee_runtime import Config
    from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX

    try:
        encoded: bytes | None = orjson.dumps(value)
    except TypeError:  # orjson writes at most 254 levels
        encoded = None
    # Only a value with that many arrays and objects can be that deep: a big flat
    # one is not walked.
    if encoded is None or encoded.count(b"[") + encoded.count(b"{") > PAYLOAD_DEPTH_MAX:
        check_depth(value, what)
    if encoded is None:  # not expected of a value parsed from JSON, but said, not raised
        raise CliError(Code.USAGE, f"{what} cannot be encoded as JSON")
    size = len(encoded)
    if size > Config.payload_bytes_max:
        raise CliError(
            Code.USAGE,
            f"{what} is {size} bytes, over the limit of {Config.payload_bytes_max}",
        )


def check_workflow(app: str, name: str) -> None:
    """Imports the app and checks that it registers `name`, without opening any home.

    Raises:
        CliError: the app fails to import, or does not know the workflow
            (the message lists the ones it knows).
    """
    from fusee_runtime import Engine, NotFound
    from fusee_runtime.engine.registry import AppImportError, load_app

    try:
        load_app(app)
    except AppImportError as e:
        raise CliError(Code.USAGE, said(e)) from None
    try:
        # Building an Engine touches no file; only open() does.
        Engine(app=None).workflow(name)
    except NotFound as e:
        raise CliError(Code.USAGE, str(e)) from None


def check_id(workflow_id: str) -> str:
    """The id as given, or a `CliError` saying what is wrong with it. An id that only
    runs of older versions may have (`.`, `..`) passes, so they can still be read; the
    engine refuses to start a run with one (exit 2)."""
    from fusee_runtime import Rejected
    from fusee_runtime.engine.engine import check_id

    try:
        return check_id(workflow_id, existing=True)
    except Rejected as e:
        raise CliError(Code.USAGE, str(e)) from None


def has_journal(home: Path) -> bool:
    """Whether anything may have been recorded in `home`, so read-only commands do not
    create one; with a store (`--store`, FUSEE_STORE) the database says, so: yes."""
    return store() is not None or (home / "journal").is_dir()


def no_run(workflow_id: str) -> CliError:
    return CliError(Code.NOT_FOUND, f"no run with id {workflow_id!r}")


def store() -> str | None:
    """The journal's store: `--store` (before the command) or FUSEE_STORE; None, the
    local journal.

    Raises:
        CliError: it is not a PostgreSQL URL (exit 2).
    """
    url = os.environ.get("FUSEE_STORE") or None
    if url is not None and not url.startswith(("postgresql://", "postgres://")):
        # Its scheme at most: the rest may hold a password.
        scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]{0,19}:", url)
        shown = f", not {scheme.group()}//..." if scheme else ""
        raise CliError(
            Code.USAGE,
            f"--store (or FUSEE_STORE) takes a PostgreSQL URL, postgresql://user@host/db{shown}",
        )
    return url


def unusable_home(home: Path, e: OSError) -> CliError:
    """The error for a home that cannot be a directory of ours (a file, a dangling link...)."""
    where = f" ({e.filename})" if e.filename and str(e.filename) != str(home) else ""
    return CliError(Code.USAGE, f"cannot use {home} as the fusee home: {e.strerror or e}{where}")


def command_of(pid: int | None) -> str:
    """` (fusee tail-stream t-1 progress)`: the command line of process `pid`, where the
    system tells it (Linux's /proc), for a message that names a process; else ""."""
    if pid is None:
        return ""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    if words and Path(words[0]).name.startswith("python") and len(words) > 1:
        words = words[1:]  # (the script, not the interpreter that runs it)
    if not words:
        return ""
    words[0] = Path(words[0]).name
    line = " ".join(words)
    return f" ({line if len(line) <= 80 else line[:79] + '…'})"


def opening_error(home: Path, e: Exception) -> CliError | None:
    """The `CliError` for an error met opening or reaching a home, or None for any other.

    The library says what went wrong (`fusee_runtime.control.connect`);
    this adds what the person can do about it, and exit 2.
    """
    from fusee_runtime import HomeLocked, JournalCorrupt, StoreUnavailable
    from fusee_runtime.control.client import OwnerUnanswered
    from fusee_runtime.engine.registry import AppImportError

    if isinstance(e, OSError):
        return unusable_home(home, e)
    if isinstance(e, HomeLocked):
        return Locked(Code.USAGE, f"{e}{command_of(e.pid)}; stop it or wait for it to finish")
    if isinstance(e, AppImportError | JournalCorrupt | OwnerUnanswered | StoreUnavailable):
        return CliError(Code.USAGE, said(e))
    if isinstance(e, ValueError) and "Config.store" in str(e):
        return CliError(Code.USAGE, str(e))
    return None


@contextlib.asynccontextmanager
async def open_engine(
    home: Path, app: str, *, drive: bool = True, grace: float = 0.0, **config: Any
) -> AsyncIterator[Engine]:
    """Opens the home in this process for the duration of a command.

    It is `fusee_runtime.control.connect.open_home` (which says what
    `drive`, `grace` and `config` do) with the errors said for people.

    Raises:
        CliError: the app fails to import, another process owns the home,
            or the journal is damaged before its tail.
    """
    from fusee_runtime.control.connect import open_home

    config.setdefault("store", store())
    async with contextlib.AsyncExitStack() as stack:
        try:
            engine = await stack.enter_async_context(
                open_home(home, app, drive=drive, grace=grace, **config)
            )
        except Exception as e:
            mapped = opening_error(home, e)
            if mapped is None:
                raise
            raise mapped from None
        yield engine


@contextlib.asynccontextmanager
async def control(
    home: Path, app: str | None, *, drive: bool, gives_way: bool = False
) -> AsyncIterator[ControlApi]:
    """The home's control API: its owner's, over the socket, or else this process's own.

    `gives_way`: a command that opens the home only to follow a run lets a server
    that starts take it (`Control.give_way`; `follow.through_owners` follows on).

    `app` is what a home opened here loads; a command that only reads gives
    None, so that it imports none of the app's code (a slow or broken app
    does not keep anyone from looking at the runs).

    It is `fusee_runtime.control.connect.connect` (which says how it tries
    both ways, for how long) with the errors said for people, and a line on
    stderr when it has waited a second for another process to let go of the home.

    Raises:
        CliError: the owner does not answer, or what `open_engine` raises.
    """
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.connect import connect

    def waiting(pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        echo_err(f"waiting for {who} to let go of {home} (a command, or an owner still opening it)")

    async with contextlib.AsyncExitStack() as stack:
        try:
            ctl = await stack.enter_async_context(
                connect(home, app, drive=drive, waiting=waiting, store=store())
            )
        except Exception as e:
            mapped = opening_error(home, e)
            if mapped is None:
                raise
            raise mapped from None
        if isinstance(ctl, Control):
            ctl.engine.gives_way = gives_way
        yield ctl


def act(
    home: Path,
    app: str,
    workflow_id: str,
    action: Callable[[ControlApi, RunInfo], Awaitable[T]],
    *,
    drive: bool = False,
) -> tuple[T, int | None]:
    """Runs `action(control, info)` on the newest run of `workflow_id`.

    Returns what the action returns, and the pid of the owner that served
    it, or None when this command opened the home itself. Then it opens it
    passively: what the action appends is durable when it returns, and no
    run's code runs here; the run acts on it the next time a process drives
    the home (`fusee result ID --wait`). With `drive` (an action that needs
    the run's code, `fusee update`) the home opened here drives its runs
    while the action lasts. A home without a journal is not created.

    Raises:
        CliError: no run of that id (exit 3), or what `control` raises.
    """
    import asyncio

    if not has_journal(home):
        raise no_run(workflow_id)

    async def main() -> tuple[T, int | None]:
        async with control(home, app, drive=drive) as ctl:
            return await action(ctl, await find_run(ctl, workflow_id)), ctl.owner

    return asyncio.run(main())


async def find_run(ctl: ControlApi, workflow_id: str) -> RunInfo:
    """The newest run of `workflow_id`, or a `CliError` with exit 3."""
    from fusee_runtime import NotFound

    try:
        return await ctl.describe(workflow_id)
    except NotFound:
        raise no_run(workflow_id) from None


def owner_named(owner: int | None, past: bool = False) -> str:
    """The process that drives the runs, as a status line names it: the one that owns
    the home, or with a PostgreSQL store (`--store`, FUSEE_STORE) the worker that
    drives the journal (its pid is on the machine it runs on); None: this one.
    `past`: the one that did (it went away)."""
    if owner is None:
        return "this process"
    if os.environ.get("FUSEE_STORE"):
        return f"the worker that {'drove' if past else 'drives'} the journal (pid {owner})"
    return f"the process that {'owned' if past else 'owns'} the home (pid {owner})"


def goes_on(workflow_id: str, owner: int | None) -> str:
    """When a run acted on by a command goes on: the end of a status line."""
    if owner is not None:
        return f"now, in {owner_named(owner)}"
    return f"when a process next drives the home: `fusee result {workflow_id} --wait`"
