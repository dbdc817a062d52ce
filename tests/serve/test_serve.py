"""`fusee serve`: owns the home until SIGTERM, stops cleanly, refuses a second server,
and reloads changed workflow code with --reload.

Step functions here report through the `fusee.app` logger, which the
server prints as `log` events: the test reads those instead of waiting on
time. A step's side ledger (appended and fsynced before the step returns)
counts how many times its function ran.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

SLOW_APP = """
import logging, os, time
from pathlib import Path
from fusee_runtime import Ctx, step, workflow

log = logging.getLogger("fusee.app")
HERE = Path(__file__).parent


def ledger(line):
    fd = os.open(HERE / "ledger", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (line + "\\n").encode())
    os.fsync(fd)
    os.close(fd)


@step
def work(x):
    ledger(f"start {os.getpid()}")
    log.info("work started")
    while not (HERE / "release").exists():  # the test lets the step finish
        time.sleep(0.01)
    ledger("end")
    return x * 10


@step
async def quick(x):
    return x + 1


@workflow
async def slow(ctx: Ctx, x: int) -> int:
    return await quick(await work(x))
"""


def start_slow(s: Any, fusee: Any, wid: str, x: int) -> None:
    """Starts `slow` through the server; returns once its step function runs."""
    started = fusee("start", "slow", "--input", "-", "--id", wid, "--detach", input=str(x))
    assert started.returncode == 0, started.stderr
    s.log_until("work started")


def starts(workdir: Path) -> int:
    ledger = workdir / "ledger"
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return sum(1 for line in lines if line.startswith("start"))


def test_a_second_server_on_the_home_exits_2_naming_the_owner(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any
) -> None:
    app_module(SLOW_APP)
    first = serve()
    pid = first.until("serving")["pid"]
    second = serve()
    assert second.proc.wait() == 2
    err = second.stderr.read_text()
    assert err.startswith("error: ") and err.count("\n") == 1
    assert f"locked by process {pid}" in err
    # What holds it, where the system says (a follower that took the home over, found
    # by a new user, was not named): the command line.
    if Path(f"/proc/{pid}").is_dir():
        assert f"locked by process {pid} (fusee serve" in err
    assert first.stop() == 0


def test_sigterm_lets_a_running_step_finish_and_its_result_is_kept(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    app_module(SLOW_APP)
    s = serve()
    s.until("serving")
    start_slow(s, fusee, "s-1", 1)
    s.proc.send_signal(signal.SIGTERM)
    assert s.until("stopping")["grace"] == 10
    (workdir / "release").touch()  # the step finishes within the grace period
    assert s.stop(None) == 0
    assert s.events[-1]["event"] == "stopped"

    again = serve()
    again.until("serving")
    done = fusee("result", "s-1", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["result"] == 11
    assert starts(workdir) == 1  # its result was durable: it did not run again
    assert again.stop() == 0


def test_a_second_sigterm_cuts_the_grace_period_short(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    app_module(SLOW_APP)
    s = serve("--grace", "3600")
    s.until("serving")
    start_slow(s, fusee, "s-3", 3)
    s.proc.send_signal(signal.SIGTERM)
    s.until("stopping")
    # Meanwhile the owner still answers, and says it is stopping to what would start work.
    described = fusee("describe", "s-3", "--json")
    assert orjson.loads(described.stdout)["status"] == "running"
    refused = fusee("start", "slow", "--input", "-", "--id", "s-4", "--detach", input="4")
    assert refused.returncode == 2
    assert "is stopping" in refused.stderr and refused.stderr.count("\n") == 1
    assert s.stop(signal.SIGTERM) == 0  # not an hour later
    assert [e["event"] for e in s.events[-2:]] == ["hurrying", "stopped"]


def test_a_step_cut_off_by_the_grace_period_runs_again_on_the_next_serve(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    app_module(SLOW_APP)
    s = serve("--grace", "0.2")
    s.until("serving")
    start_slow(s, fusee, "s-2", 2)
    assert s.stop() == 0  # the step never finishes: cut off after 0.2 s
    assert s.events[-1] == {**s.events[-1], "event": "stopped", "runs_open": 1}
    assert starts(workdir) == 1

    (workdir / "release").touch()
    again = serve()
    again.until("serving")
    done = fusee("result", "s-2", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["result"] == 21
    assert starts(workdir) == 2  # at most twice: once cut off, once to the end
    assert again.stop(signal.SIGINT) == 0


RELOAD_APP = """
from fusee_runtime import Ctx, workflow


@workflow
async def greet(ctx: Ctx, name: str) -> str:
    return "{greeting}, " + name
"""


def test_reload_runs_the_next_run_on_the_edited_code(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    path = app_module(RELOAD_APP.format(greeting="hello"))

    def greet(wid: str, *app: str) -> str:
        done = fusee("start", "greet", "--input", "-", "--id", wid, "--json", *app, input='"ann"')
        assert done.returncode == 0, done.stderr
        return orjson.loads(done.stdout)["result"]

    s = serve("--reload")
    s.until("serving")
    assert greet("g-1") == "hello, ann"
    path.write_text(RELOAD_APP.format(greeting="bonjour"))
    assert s.until("reloaded")["modules"] == ["servedapp"]
    assert greet("g-2") == "bonjour, ann"

    path.write_text("def broken(:\n")
    failed = s.until("reload_failed")
    assert "cannot reload app module 'servedapp': SyntaxError" in failed["error"]
    # The server keeps the code it had. (This command imports an app of its own
    # that declares greet, since servedapp no longer imports; the server runs it.)
    (workdir / "cliapp.py").write_text(RELOAD_APP.format(greeting="not this one"))
    assert greet("g-3", "--app", "cliapp") == "bonjour, ann"
    assert s.stop() == 0


def test_stats_lines_report_runs_steps_and_syncs(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    app_module(SLOW_APP)
    (workdir / "release").touch()
    s = serve("--stats-every", "0.1")
    s.until("serving")
    assert fusee("start", "slow", "--input", "-", "--id", "st-1", input="3").returncode == 0
    while (stats := s.until("stats"))["steps_per_s"] == 0:
        pass  # a window in which the two steps ran comes by
    assert stats["syncs_per_s"] > 0 and stats["fdatasync_ms"] > 0
    assert set(stats) == {
        "event",
        "at",
        "runs_open",
        "steps_per_s",
        "syncs_per_s",
        "fdatasync_ms",
        "fdatasync_share",
    }
    assert s.stop() == 0


def test_every_event_line_has_an_iso_instant_and_only_documented_fields(
    serve: Callable[..., Any], app_module: Callable[[str], Path]
) -> None:
    # (Issue 42, item 8: `at` was a Unix number, and the events were not in docs/json.md.)
    app_module(SLOW_APP)
    s = serve("--stats-every", "0.05")
    s.until("serving")
    s.until("stats")
    assert s.stop() == 0

    assert [e["event"] for e in s.events][-2:] == ["stopping", "stopped"]
    documented = _documented_serve_fields()
    for event in s.events:
        at = datetime.fromisoformat(event["at"])
        assert at.utcoffset() == timedelta(0), event
        assert set(event) <= documented, (event, set(event) - documented)


def _documented_serve_fields() -> set[str]:
    """The fields docs/json.md's table for `fusee serve` lists (a row may name several)."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "json.md").read_text()
    section = docs.split("## `fusee serve` (stdout not a terminal)\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (`[^|]+`) \|", section, re.MULTILINE)
    return {name for row in rows for name in re.findall(r"`(\w+)`", row)}


def test_on_a_terminal_it_keeps_a_live_line_and_says_how_it_stopped(
    app_module: Callable[[str], Path], env: dict[str, str], workdir: Path
) -> None:
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    from processes import fusee_script

    app_module(SLOW_APP)
    leader, follower = pty.openpty()
    # The terminal is as wide as the pty says: a home as long as pytest-xdist's
    # (popen-gwN/...) would wrap the banner at 80 columns (a pty with no size, or
    # the COLUMNS=80 that xdist's workers have).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 400, 0, 0))
    wide = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [fusee_script(), "serve"], cwd=workdir, env=wide, stdout=follower, stderr=follower
    )
    os.close(follower)
    seen = b""

    def read_until(text: bytes) -> None:
        nonlocal seen
        while text not in seen:
            chunk = os.read(leader, 4096)
            assert chunk, seen
            seen += chunk

    try:
        read_until(b"fusee serve")  # in bold: escapes around it
        read_until(f" pid {proc.pid}".encode())
        read_until(b"steps/s")  # the live line
        proc.send_signal(signal.SIGTERM)
        read_until(b"open run(s) resume on the next open")
        assert proc.wait() == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert b"{" not in seen  # no JSON on a terminal


WAITING_APP = """
from fusee_runtime import Ctx, workflow


@workflow
async def waits(ctx: Ctx, _) -> str:
    await ctx.wait_for("{signal}")
    return "{outcome}"
"""


def test_a_parked_run_takes_the_reloaded_code_at_its_next_replay(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any
) -> None:
    """A compatible edit changes what a parked run does next; an edit that asks for
    another operation than the journal holds leaves the run stuck, saying why."""
    path = app_module(WAITING_APP.format(signal="go", outcome="old code"))
    s = serve("--reload")
    s.until("serving")
    for wid in ("w-1", "w-2"):
        assert fusee("start", "waits", "--id", wid, "--detach").returncode == 0

    path.write_text(WAITING_APP.format(signal="go", outcome="new code"))
    s.until("reloaded")
    assert fusee("signal", "w-1", "go").returncode == 0
    done = fusee("result", "w-1", "--wait", "--json")
    assert orjson.loads(done.stdout)["result"] == "new code"

    path.write_text(WAITING_APP.format(signal="proceed", outcome="new code"))
    s.until("reloaded")
    assert fusee("signal", "w-2", "go").returncode == 0
    s.log_until("w-2")  # the server logs the stuck run
    described = orjson.loads(fusee("describe", "w-2", "--json").stdout)
    assert described["status"] == "stuck"
    assert "replay mismatch at operation #1" in described["error"]
    assert "'go'" in described["error"] and "'proceed'" in described["error"]
    assert s.stop() == 0


HELPED_APP = """
from fusee_runtime import Ctx, workflow
import greeting


@workflow
async def greet(ctx: Ctx, name: str) -> str:
    return greeting.WORD + ", " + name
"""


def test_reload_follows_editors_that_save_by_rename_and_modules_beside_the_app(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    """Found by trying it: the second save by rename was missed (the watch held the old
    file), and an edit of a module the app imports from beside it was never reloaded."""
    app_module(HELPED_APP)
    helper = workdir / "greeting.py"
    helper.write_text('WORD = "hello"\n')

    def greet(wid: str) -> str:
        done = fusee("start", "greet", "--input", "-", "--id", wid, "--json", input='"ann"')
        assert done.returncode == 0, done.stderr
        return orjson.loads(done.stdout)["result"]

    def save_by_rename(path: Path, text: str) -> None:
        fresh = path.with_name(path.name + ".swp")
        fresh.write_text(text)
        fresh.replace(path)

    s = serve("--reload")
    s.until("serving")
    assert greet("h-1") == "hello, ann"
    for i, word in enumerate(["bonjour", "hallo", "ciao"]):
        save_by_rename(helper, f'WORD = "{word}"\n')
        assert "greeting" in s.until("reloaded")["modules"]
        assert greet(f"h-{i + 2}") == f"{word}, ann"
    assert s.stop() == 0


def test_a_reader_that_goes_away_does_not_break_the_server(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any, workdir: Path
) -> None:
    """Found by trying it: `fusee serve | head -1` printed a traceback for every later
    line, and SIGTERM then exited 1."""
    app_module(SLOW_APP)
    (workdir / "release").touch()
    s = serve("--stats-every", "0.05")
    s.until("serving")
    assert s.proc.stdout is not None
    s.proc.stdout.close()  # the reader is gone: the next lines meet a broken pipe
    done = fusee("start", "slow", "--input", "-", "--id", "b-1", input="1")
    assert done.returncode == 0, done.stderr  # it goes on serving
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait() == 0
    assert s.stderr.read_text() == ""
