"""Every exit code of every `fusee` command, in one table.

DESIGN.md: 0 success, 1 the workflow failed or was cancelled (or is stuck
or paused; `check` found damage), 2 usage or input error, 3 not found,
4 timed out waiting. A failure leaves exactly one `error: ` line on stderr
(exit 4 leaves a status line instead, and `check` prints its report too),
never a traceback; a command refused (2, 3) leaves the journal as it was.

Each case names what its home holds: `runs` (a copy of one home built
once through the CLI), `none` (never opened), `bare` (an empty directory),
`damaged` (`runs` with a byte flipped in its first record), `stuck` (run
s-1, whose code changed under it), `under_file` (a path below a file) or
`dangling` (a symlink to nothing). Typer's own usage errors (a missing
argument, a bad option value) are in `USAGE`: exit 2 with its usage text.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from fusee_cli.app import app
from fusee_runtime.journal import format as fmt

APP = "fusee_cli_testapp"
BROKEN = "fusee_cli_codes_broken"
"""An app module that raises on import, written by `test_exit_code` when a case names it."""
SEGMENT_BYTES = 1 << 20
"""The size of the `runs` home's segment (see `template`)."""
IMPORT_ERROR = f"cannot import app module {BROKEN!r}: RuntimeError: no database configured"

# (the start command after `fusee start`, its stdin, its exit code)
RUNS = [
    ("cli_echo --input - --id e-1", '"x"', 0),  # completed
    ("cli_fail --input - --id f-1", '{"cents": 9}', 1),  # failed
    ("cli_pause --id p-1", None, 1),  # paused
    ("cli_hang --id h-1 --detach", None, 0),  # running
    ("cli_wait --id w-1 --detach", None, 0),  # parked on signal go
    ("cli_hang --id t-1 --detach", None, 0),  # terminated below
    ("cli_wait --id c-1 --detach", None, 0),  # cancelled below
    ("cli_stream --id st-1 --detach", None, 0),  # completed below, stream items [1, 2]
]
AFTER = ["terminate t-1", "cancel c-1", "signal st-1 more 2"]
DRIVEN = [("c-1", 1), ("st-1", 0)]  # `result --wait` closes them


@dataclass(frozen=True)
class Case:
    line: str
    code: int
    fragment: str
    home: str = "runs"
    stdin: str | None = None
    app: str = APP


def case(line: str, code: int, fragment: str, xfail: str | None = None, **kw: str) -> object:
    c = Case(line, code, fragment, **kw)
    name = f"{line} -> {code}" + (f" [{c.home}]" if c.home != "runs" else "")
    name += " [broken app]" if c.app == BROKEN else ""
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(c, id=name, marks=marks)


NO_RUN = "no run with id 'nope'"
BAD_ID = "a workflow id may not contain '/'"

CASES = [
    # start
    case("start cli_echo --input - --id e-2", 0, '"y"', stdin='"y"'),
    case("start cli_echo --id e-1", 0, "run e-1 already exists"),
    case("start cli_fail --input - --id f-2", 1, "run f-2 failed: ", stdin='{"cents": 5}'),
    case("start cli_wait --id c-1", 1, "run 'c-1' was cancelled: requested with fusee cancel"),
    case("start cli_pause --id p-2", 1, "run p-2 is paused: paused in step 'wobble'"),
    case("start cli_shifty --id s-1", 1, "run s-1 is stuck: replay mismatch", home="stuck"),
    case("start cli_hang --id h-2 --timeout 0.1", 4, "fusee result h-2 --wait"),
    case("start nope", 2, "unknown workflow 'nope'; known workflows:"),
    case("start cli_echo --input -", 2, "input on stdin is not JSON", stdin="{"),
    case("start cli_echo --input /nonexistent/in.json", 2, "does not exist"),
    case("start cli_echo --id a/b", 2, BAD_ID),
    case("start cli_echo --id ''", 2, "a workflow id is a non-empty string"),
    case("start cli_echo --id e-2", 2, "journal corrupt in", home="damaged"),
    case("start cli_echo --id e-2", 2, "as the fusee home", home="under_file"),
    case("start cli_echo --id e-2", 2, "as the fusee home", home="dangling"),
    # result
    case("result e-1", 0, '"x"'),
    case("result f-1", 1, "run f-1 failed: "),
    case("result c-1", 1, "run 'c-1' was cancelled"),
    case("result t-1", 1, "run 't-1' was terminated"),
    case("result p-1", 1, "run p-1 is paused"),
    case("result s-1 --wait", 1, "run s-1 is stuck: replay mismatch", home="stuck"),
    case("result nope", 3, NO_RUN),
    case("result nope --wait", 3, NO_RUN, home="none"),
    case("result h-1", 4, "run h-1 has not finished (status running)"),
    case("result h-1 --wait --timeout 0.1", 4, "run h-1 has not finished"),
    # describe, list, history
    case("describe e-1", 0, "cli_echo"),
    case("describe nope", 3, NO_RUN),
    case("describe nope", 3, NO_RUN, home="none"),
    case("describe e-1", 2, "journal corrupt in", home="damaged"),
    case("list", 0, "st-1"),
    case("list", 0, "no runs: there is no home at", home="none"),
    case("list", 0, "no runs", home="bare"),
    case("list --limit 0", 0, "st-1"),  # 0: every run
    case("list --status open", 0, "h-1"),
    case(
        "list --status done", 2, "unknown status 'done'; statuses: open, scheduled, queued, running"
    ),
    case("list --where team=core", 0, "no runs"),
    case("list --where team", 2, "a where condition is KEY=VALUE"),
    case("describe a/b", 2, BAD_ID),
    case("result a/b", 2, BAD_ID),
    case("history a/b", 2, BAD_ID),
    case("logs a/b", 2, BAD_ID),
    case("history e-1", 0, "RunCompleted"),
    case("history nope", 3, NO_RUN),
    case("history nope", 3, NO_RUN, home="none"),
    # signal
    case("signal w-1 go 1", 0, "delivered signal 'go' to w-1"),
    case("signal e-1 go 1", 2, "run 'e-1' is completed"),
    case("signal w-1 go --input -", 2, "input on stdin is not JSON", stdin="{"),
    case("signal w-1 go --input /nonexistent/v.json", 2, "does not exist"),
    case("signal w-1 go 1 --input -", 2, "as VALUE or with --input, not both", stdin="2"),
    case("signal w-1 ''", 2, "a signal name is a non-empty string"),
    case("signal a/b go", 2, BAD_ID),
    case("signal nope go", 3, NO_RUN),
    case("signal nope go", 3, NO_RUN, home="none"),
    # resume
    case("resume p-1", 0, "resumed p-1 (paused in step 'wobble'"),
    case("resume h-1", 2, "run 'h-1' is running: only a paused or stuck run resumes"),
    case("resume e-1", 2, "run 'e-1' is closed (completed)"),
    case("resume a/b", 2, BAD_ID),
    case("resume nope", 3, NO_RUN),
    case("resume nope", 3, NO_RUN, home="none"),
    # Stuck once a process ran its code against the changed code: that is recorded,
    # so a passive `resume` sees it (before, it said "running" and exited 2).
    case("resume s-1", 0, "resumed s-1", home="found_stuck"),
    # cancel, terminate
    case("cancel w-1", 0, "cancel of w-1 recorded"),
    case("cancel e-1", 2, "run 'e-1' is already closed (completed)"),
    case("cancel a/b", 2, BAD_ID),
    case("cancel nope", 3, NO_RUN),
    case("cancel nope", 3, NO_RUN, home="none"),
    case("terminate h-1", 0, "terminated h-1 (it was running)"),
    case("terminate t-1", 2, "run 't-1' is already closed (terminated)"),
    case("terminate a/b", 2, BAD_ID),
    case("terminate nope", 3, NO_RUN),
    case("terminate nope", 3, NO_RUN, home="none"),
    # reset
    case("reset e-1 --to 1", 0, "reset e-1: run "),
    case("reset e-1 --to echo", 0, "keeps operations before #1"),
    case("reset e-1 --to 0", 2, "operation numbers start at 1"),
    case(
        "reset e-1 --to nope",
        2,
        "run 'e-1' has no operation named 'nope'; --to takes an operation number from 1 to 2 "
        "or the name of a step (echo)",
    ),
    case("reset e-1 --to 1.0.1", 2, "run 'e-1' has no operation at position '1.0.1'"),
    case("reset e-1 --to ''", 2, "--to takes an operation number, a position or an operation's"),
    case("reset e-1 --to 99", 2, "operation #99 is past the end of run 'e-1'"),
    case("reset a/b --to 1", 2, BAD_ID),
    case("reset nope --to 1", 3, NO_RUN),
    case("reset nope --to 1", 3, NO_RUN, home="none"),
    # tail-stream
    case("tail-stream st-1 items", 0, "1\n2\n"),
    case("tail-stream st-1 items --no-follow", 0, "1\n2\n"),
    case("tail-stream st-1 ''", 2, "a stream name is a string of 1 to"),
    case("tail-stream a/b items", 2, BAD_ID),
    case("tail-stream nope items", 3, NO_RUN),
    case("tail-stream nope items", 3, NO_RUN, home="none"),
    # logs
    case("logs e-1", 0, "run closed: completed"),
    case("logs e-1 -f", 0, "run closed: completed"),
    case("logs e-1 -f --json", 0, '"status":"completed"'),
    case("logs h-1", 0, "no log lines for h-1 yet"),
    case("logs nope", 3, NO_RUN),
    case("logs nope -f", 3, NO_RUN),
    case("logs nope", 3, NO_RUN, home="none"),
    case("logs nope -f", 3, NO_RUN, home="none"),
    # query: with no owner, the run is replayed in memory here, and its handlers asked
    case("query h-1 total", 2, "run 'h-1' has no query handler 'total'; its handlers: none"),
    case("query nope total", 3, NO_RUN),
    # update: with no owner, this command drives the home until the update is applied
    case("update h-1 set-limit 500", 2, "run 'h-1' has no update handler 'set-limit'"),
    case("update nope set-limit 500", 3, NO_RUN),
    # complete, fail: a token this home never issued
    case("complete 4f1c2b7e true", 3, "is not a completion token of this home"),
    case("fail 4f1c2b7e rejected", 3, "is not a completion token of this home"),
    case("complete 4f1c2b7e true", 3, "is not a completion token of this home", home="none"),
    # check
    case("check", 0, "damage"),
    case("check", 0, "damage", app=BROKEN),  # check imports no app
    case("check", 1, "journal corrupt in", home="damaged"),
    case("check", 2, "no journal in", home="none"),
    case("check", 2, "no journal in", home="bare"),
    # prune: `runs` closed its runs just now, so only 0 reaches them
    case("prune --older-than 7d", 0, "pruned 0 runs closed over 7d ago"),
    case("prune --older-than 0", 0, "pruned 5 runs closed so far"),
    case("prune --older-than 0 --json", 0, '"pruned": 5'),
    case("prune --older-than 7d", 0, "no runs to prune", home="none"),
    case("prune --older-than soon", 2, "--older-than takes a duration such as 30d"),
    case("prune --older-than 5201w", 2, "--older-than takes at most 5200w"),
    case("prune --older-than 7d", 2, "journal corrupt in", home="damaged"),
    # an app module that raises on import: the reading commands import none of
    # its code; every command that loads the app exits 2
    case("describe e-1", 0, "completed", app=BROKEN),
    case("list", 0, "e-1", app=BROKEN),
    case("history e-1", 0, "RunCompleted", app=BROKEN),
    *(
        case(line, 2, IMPORT_ERROR, app=BROKEN)
        for line in [
            "start cli_echo",
            "result e-1",
            "signal w-1 go",
            "resume p-1",
            "cancel w-1",
            "terminate h-1",
            "reset e-1 --to 1",
            "tail-stream st-1 items",
            "logs h-1",  # logs loads the app only for an id with no log lines
            "prune --older-than 7d",
        ]
    ),
]

USAGE = [
    "start",
    "start cli_echo --timeout soon",
    "start cli_echo --timeout -1",
    "result",
    "result e-1 --timeout soon",
    "describe",
    "list --limit -1",
    "history",
    "signal w-1",
    "resume",
    "cancel",
    "terminate",
    "reset e-1",
    "tail-stream st-1",
    "logs",
    "query h-1",
    "update h-1",
    "complete",
    "fail 4f1c2b7e",
    "check --nope",
    "prune",
    "prune --older-than",
    "frobnicate",
]
"""Refused by typer before the command runs: exit 2 with its usage text, not one line."""


Files = dict[Path, tuple[bytes, int]]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Files:
    """The `runs` home, built once through the CLI; every file as (bytes, size).

    The bytes leave out trailing zeros: a copy writes them and extends the
    file with zeros. A segment is kept at `SEGMENT_BYTES`, not the 64 MiB the
    CLI preallocates: the engine takes the size of the segment it appends to
    from the file, so the copy is the home an engine with that segment size
    would have written, and every read of it is cheap.
    """
    home = tmp_path_factory.mktemp("codes") / "home"
    on = ["--home", str(home), "--app", APP]
    runner = CliRunner()

    def fusee(line: str, stdin: str | None, code: int) -> None:
        r = runner.invoke(app, [*shlex.split(line), *on], input=stdin, prog_name="fusee")
        assert r.exit_code == code, (line, r.output)

    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(Path(__file__).resolve().parent))
        for name in ("FUSEE_HOME", "FUSEE_APP"):
            mp.delenv(name, raising=False)
        for line, stdin, code in RUNS:
            fusee(f"start {line}", stdin, code)
        for line in AFTER:
            fusee(line, None, 0)
        for wid, code in DRIVEN:
            fusee(f"result {wid} --wait", None, code)
    files: Files = {}
    for path in sorted(home.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            kept = data.rstrip(b"\0")
            size = SEGMENT_BYTES if path.suffix == ".seg" else len(data)
            assert len(kept) <= size
            files[path.relative_to(home)] = (kept, size)
    return files


def copy(files: Files, home: Path) -> None:
    for rel, (data, size) in files.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        with path.open("r+b") as f:
            f.truncate(size)


def prepare(c: Case, home: Path, template: Files, make_stuck: Callable[[], None]) -> Path:
    """Builds the case's home; returns the path to pass as --home."""
    if c.home in ("runs", "damaged"):
        copy(template, home)
    if c.home == "damaged":
        # As a crash before any checkpoint leaves it: opening then reads the record (a
        # checkpoint that covers it would let opening start after it).
        for p in (home / "journal").glob("*.ckpt"):
            p.unlink()
        with (home / "journal" / "0000000000.seg").open("r+b") as f:
            f.seek(fmt.HEADER_BYTES + fmt.FRAME_BYTES + 1)  # inside the first record
            byte = f.read(1)[0]
            f.seek(-1, 1)
            f.write(bytes([byte ^ 0xFF]))
    elif c.home == "bare":
        home.mkdir()
    elif c.home == "under_file":
        home.write_text("a file, not a directory\n")
        return home / "below"
    elif c.home == "dangling":
        home.symlink_to(home.parent / "gone")
    elif c.home in ("stuck", "found_stuck"):
        make_stuck()
    return home


def no_traceback(r: Result) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output


@pytest.mark.parametrize("c", CASES)
def test_exit_code(
    c: Case,
    cli: Callable[..., Result],
    home: Path,
    journal,
    template: Files,
    make_stuck: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    if c.app == BROKEN:
        (tmp_path / f"{BROKEN}.py").write_text("raise RuntimeError('no database configured')\n")
        monkeypatch.syspath_prepend(str(tmp_path))
    where = prepare(c, home, template, make_stuck)
    if c.home == "found_stuck":  # a process drives it and finds it stuck
        assert cli("result", "s-1", "--wait", "--home", str(where), "--app", c.app).exit_code == 1
    before = (where.exists(), journal(where))

    r = cli(*shlex.split(c.line), "--home", str(where), "--app", c.app, input=c.stdin)

    assert r.exit_code == c.code, r.output
    no_traceback(r)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    if c.code in (0, 4):
        assert errors == [], r.stderr
        assert c.fragment in (r.output if c.code == 0 else r.stderr), r.output
        if c.code == 4:
            assert r.stdout == ""
        return
    assert len(errors) == 1, r.stderr
    assert c.fragment in errors[0], errors[0]
    if c.code == 1 and c.line != "check":
        # The workflow's outcome, after the status lines of following it.
        assert r.stderr.splitlines()[-1] == errors[0]
        assert r.stdout == ""
        return
    # Refused (2, 3), or `check` finding damage: one line, and nothing recorded.
    assert r.stderr.splitlines() == errors
    assert (r.stdout != "") == (c.code == 1), r.stdout  # check prints its report
    assert (where.exists(), journal(where)) == before


@pytest.mark.parametrize("line", USAGE)
def test_usage_error(cli, home, journal, template: Files, line: str) -> None:
    copy(template, home)
    before = journal(home)
    r = cli(*shlex.split(line), "--home", str(home), "--app", APP)
    assert r.exit_code == 2, r.output
    no_traceback(r)
    assert r.stdout == ""
    assert "Error: " in r.stderr and "Usage: fusee" in r.stderr
    assert journal(home) == before
