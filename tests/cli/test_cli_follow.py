"""Following things from the CLI (issue 17, item 5; item 7 for `logs` and `tail-stream`).

`result --wait` shows the live line that `start` shows, on a terminal only,
and Ctrl-C ends it with `start`'s exit code; the live line of a step that
waits for its retry says why the last attempt failed, cut to the terminal;
a notice printed while the line shows stands on a line of its own; `logs`
prints readable lines unless `--json`, following or not; `logs --json` and
`tail-stream --json` print the JSON lines docs/json.md documents, with
ISO 8601 instants.

Commands run as real child processes, a terminal is a real
pseudo-terminal, Ctrl-C is a real SIGINT. No test waits on the clock: each
reads until the output it expects shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fusee_follow_testapp import DOWN
from processes import fusee_script
from test_cli_stream import DIGEST  # the digest workflow's stream
from test_cli_terminal import screen

from fusee_runtime import Ctx, step, workflow
from fusee_runtime.engine.home import HomeLock

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DOCS = REPO / "docs" / "json.md"
T0 = "2023-11-14 22:13:20.000Z"  # the fake clock's start, as `fusee logs` shows it
T0_ISO = "2023-11-14T22:13:20+00:00"  # and as `--json` gives it


class Terminal:
    """`fusee ARGS...` in a child whose stderr (or stdout, `on="stdout"`) is a
    pseudo-terminal `columns` wide; the other stream is a pipe.

    What the child writes on the terminal gathers in `raw`; `screen(raw)`
    replays it as a terminal would.
    """

    def __init__(self, args: tuple[str, ...], on: str, columns: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
        env.pop("NO_COLOR", None)
        env.update(
            TERM="xterm",
            COLUMNS=str(columns),
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        )
        leader, terminal = pty.openpty()
        streams: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        streams[on] = terminal
        self.child = subprocess.Popen(
            [fusee_script(), *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            text=True,
            # A shell that starts the suite in the background leaves SIGINT ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            **streams,
        )
        os.close(terminal)
        self._leader: int | None = leader
        self.raw = b""

    def _read(self) -> bytes:
        assert self._leader is not None
        try:
            return os.read(self._leader, 4096)
        except OSError:  # EIO: the child has exited and closed the terminal
            return b""

    def read_until(self, text: str, after: int = 0) -> int:
        """Reads what the child writes until `text` shows past byte `after`; returns
        where it starts."""
        wanted = text.encode()
        while (at := self.raw.find(wanted, after)) < 0:
            chunk = self._read()
            assert chunk, (text, screen(self.raw))
            self.raw += chunk
        return at

    def finish(self) -> tuple[int, str, str]:
        """Reads the terminal to its end, then waits for the child: its exit code, and
        what it wrote on the stream that is a pipe (the other is "")."""
        while chunk := self._read():
            self.raw += chunk
        out, err = self.child.communicate()
        self.close()
        return self.child.returncode, out or "", err or ""

    def close(self) -> None:
        if self.child.returncode is None:
            self.child.kill()
            self.child.communicate()
        if self._leader is not None:
            os.close(self._leader)
            self._leader = None


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    """Starts `fusee ARGS...` on a pseudo-terminal (see `Terminal`); kills it at the end."""
    made: list[Terminal] = []

    def start(*args: str, on: str = "stderr", columns: int = 200) -> Terminal:
        made.append(Terminal(args, on, columns))
        return made[-1]

    yield start
    for t in made:
        t.close()


# -- result --wait: the live line, Ctrl-C, a pipe ------------------------------------------------


def test_result_wait_shows_the_live_line_of_start_on_a_terminal(waiting, terminal, fusee, on):
    follower = terminal("result", "w-1", "--wait", *on)
    follower.read_until("w-1: waiting for signal 'go'")  # the live line, as `start` draws it

    assert fusee("signal", "w-1", "go", '"yes"', *on).returncode == 0

    code, out, _ = follower.finish()
    assert code == 0
    assert json.loads(out) == "yes"


@pytest.mark.parametrize(
    "command", [("result", "w-1", "--wait"), ("start", "cli_wait", "--id", "w-1")]
)
def test_ctrl_c_ends_result_wait_as_it_ends_start(waiting, terminal, fusee, on, command):
    follower = terminal(*command, *on)
    follower.read_until("w-1: waiting for signal 'go'")

    follower.child.send_signal(signal.SIGINT)

    code, out, _ = follower.finish()
    assert (code, out) == (0, "")  # the same for both: the run goes on, durable
    said = "\n".join(screen(follower.raw))
    assert "run w-1 is durable and resumes when the home is next opened" in said
    assert "Traceback" not in said
    described = fusee("describe", "w-1", "--json", *on)
    assert json.loads(described.stdout)["status"] == "parked"


def test_result_wait_into_a_pipe_prints_the_result_and_no_progress(waiting, spawn, fusee, on):
    follower = spawn("result", "w-1", "--wait", *on)

    assert fusee("signal", "w-1", "go", '"yes"', *on).returncode == 0

    out, err = follower.communicate()
    assert follower.returncode == 0, err
    assert json.loads(out) == "yes"
    assert err == ""


# -- the retry line -----------------------------------------------------------------------------


def _retrying(tmp_path: Path) -> list[str]:
    return ["--home", str(tmp_path / "home"), "--app", "fusee_follow_testapp"]


def test_the_retry_line_shows_the_last_failure_cut_to_the_terminal(terminal, tmp_path):
    follower = terminal(
        "start", "cli_follow_retry", "--id", "rt-1", *_retrying(tmp_path), columns=140
    )
    follower.read_until("…", after=follower.read_until("retry 2 at"))

    lines = [line for line in screen(follower.raw) if "retry 2 at" in line]
    follower.child.send_signal(signal.SIGINT)
    follower.finish()

    line = lines[-1]
    assert re.search(r"rt-1: follow_down: retry 2 at \d\d:\d\d:\d\d; attempt 1 failed: ", line)
    # The message's first line, joined to its second, up to the edge of the terminal.
    assert "failed: ConnectionError: the rates service is down (it answered 503" in line
    assert len(line) <= 140
    assert line.endswith("…")


def test_the_retry_line_in_a_pipe_holds_the_whole_message_on_one_line(spawn, tmp_path):
    follower = spawn("start", "cli_follow_retry", "--id", "rt-1", *_retrying(tmp_path))
    assert follower.stderr is not None
    line = ""
    while "retry 2 at" not in line:
        line = follower.stderr.readline()
        assert line, "the follower stopped early"

    follower.send_signal(signal.SIGINT)
    follower.communicate()

    whole = " ".join(DOWN.splitlines())
    assert re.fullmatch(
        rf"rt-1: follow_down: retry 2 at \d\d:\d\d:\d\d; attempt 1 failed: ConnectionError: "
        rf"{re.escape(whole)}\n",
        line,
    ), line


# -- notices while the live line shows ------------------------------------------------------------


def test_notices_while_result_waits_stand_on_lines_of_their_own(spawn, terminal, fusee, tmp_path):
    home = tmp_path / "home"
    on = ["--home", str(home), "--app", "fusee_cli_testapp"]
    owner = spawn("start", "cli_wait", "--id", "w-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started w-1")
    assert owner.stderr.readline() == "w-1: waiting for signal 'go'\n"  # it serves the home
    follower = terminal("result", "w-1", "--wait", *on)
    follower.read_until("w-1: waiting for signal 'go'")

    # The owner dies, and the home is held by a process that does not serve it
    # (this one) before the follower notices: it takes over, and has to wait.
    follower.child.send_signal(signal.SIGSTOP)
    owner.kill()
    owner.communicate()
    lock = HomeLock(home)
    lock.acquire()
    try:
        follower.child.send_signal(signal.SIGCONT)
        went = f"the process that owned the home (pid {owner.pid}) went away; following w-1 on"
        waits = (
            f"waiting for pid {os.getpid()} to let go of {home} "
            "(a command, or an owner still opening it)"
        )
        at = follower.read_until(waits, after=follower.read_until(went))
    finally:
        lock.release()
    follower.read_until("w-1: waiting for signal 'go'", after=at)  # the live line, back

    shown = screen(follower.raw)
    assert went in shown, shown  # each a line of its own: nothing before it nor after it
    assert waits in shown, shown
    assert fusee("signal", "w-1", "go", '"on"', *on).returncode == 0
    code, out, _ = follower.finish()
    assert (code, json.loads(out)) == (0, "on")


# -- logs: readable unless --json, following or not ---------------------------------------------


@step
def follow_cli_greet(name: str) -> str:
    from fusee_runtime import current_ctx

    current_ctx().log.info(f"greeting {name}")
    return f"hello {name}"


@workflow(name="follow_cli.greets")
async def greets(ctx: Ctx, name: str) -> str:
    ctx.log.info(f"about to greet {name}")
    return await follow_cli_greet(name)


@pytest.fixture
def greeted(make_engine) -> str:
    """Run g-1 of `follow_cli.greets`, closed, with its log lines; returns its run id."""

    async def main() -> str:
        async with make_engine() as engine:
            handle = await engine.start(greets, "ada", id="g-1")
            await handle.result()
            return handle.run_id

    return asyncio.run(main())


def _readable(run_id: str) -> list[str]:
    return [
        f"── run {run_id} (follow_cli.greets)",
        f"{T0} info  about to greet ada",
        f"{T0} info  follow_cli_greet#1 greeting ada",
        f"{T0} run closed: completed",
    ]


def test_logs_follow_prints_readable_lines_on_a_terminal(greeted, terminal, on):
    follower = terminal("logs", "g-1", "-f", *on, on="stdout")
    code, _, err = follower.finish()
    assert code == 0, err
    assert [line for line in screen(follower.raw) if line] == _readable(greeted)


@pytest.mark.parametrize("follow", [[], ["-f"]])
def test_logs_prints_readable_lines_into_a_pipe_too(greeted, fusee, on, follow):
    done = fusee("logs", "g-1", *follow, *on)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == _readable(greeted)


@pytest.mark.parametrize("follow", [[], ["-f"]])
def test_logs_json_prints_json_lines_with_iso_instants(greeted, fusee, on, follow):
    done = fusee("logs", "g-1", "--json", *follow, *on)
    assert done.returncode == 0, done.stderr
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    assert docs == [
        {
            "ts": T0_ISO,
            "level": "info",
            "id": "g-1",
            "workflow": "follow_cli.greets",
            "run_id": greeted,
            "step": step_name,
            "attempt": attempt,
            "msg": msg,
            **closed,
        }
        for step_name, attempt, msg, closed in [
            (None, None, "about to greet ada", {}),
            ("follow_cli_greet", 1, "greeting ada", {}),
            (None, None, "run closed: completed", {"event": "closed", "status": "completed"}),
        ]
    ]
    assert datetime.fromisoformat(docs[0]["ts"]) == datetime.fromtimestamp(1_700_000_000, UTC)
    assert set().union(*docs) <= _documented("fusee logs --json")


# -- tail-stream --json ------------------------------------------------------------------------


@pytest.mark.parametrize("follow", [[], ["--no-follow"]])
def test_tail_stream_json_numbers_the_items(fusee, tmp_path, follow):
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    assert fusee("start", "digest", "--id", "dg-1", *on).returncode == 0

    done = fusee("tail-stream", "dg-1", "entries", "--json", *follow, *on)

    assert done.returncode == 0, done.stderr
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    assert docs == [{"index": i, "item": item} for i, item in enumerate(DIGEST)]
    assert set().union(*docs) == _documented("fusee tail-stream --json")


def test_tail_stream_json_follows_item_by_item(spawn, fusee, on):
    assert fusee("start", "cli_stream", "--id", "s-1", "--detach", *on).returncode == 0
    follower = spawn("tail-stream", "s-1", "items", "--json", *on)  # runs the run here
    assert follower.stdout is not None

    assert json.loads(follower.stdout.readline()) == {"index": 0, "item": 1}
    assert fusee("signal", "s-1", "more", '{"two": 2}', *on).returncode == 0

    rest, err = follower.communicate()
    assert follower.returncode == 0, err
    assert [json.loads(line) for line in rest.splitlines()] == [{"index": 1, "item": {"two": 2}}]


# -- the shapes are documented ------------------------------------------------------------------


def _documented(command: str) -> set[str]:
    """The fields docs/json.md lists in the table under the heading of `command`."""
    section = DOCS.read_text().split(f"## `{command}`\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))


@pytest.mark.parametrize(
    ("command", "fields"),
    [
        (
            "logs",
            {
                "ts",
                "level",
                "id",
                "workflow",
                "run_id",
                "step",
                "attempt",
                "msg",
                "event",
                "status",
            },
        ),
        ("tail-stream", {"index", "item"}),
    ],
)
def test_each_json_line_shape_is_documented_and_its_help_points_there(fusee, command, fields):
    assert fields <= _documented(f"fusee {command} --json")
    helped = fusee(command, "--help", COLUMNS="200")
    assert "docs/json.md" in " ".join(helped.stdout.split())
