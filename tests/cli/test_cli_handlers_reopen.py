"""A parked run's query and update handlers answer through the real `fusee` command
whatever process drove its code before (DESIGN.md, "Handlers are always there").

Every command here is a child process of the installed entry point. A run of
`hr_box` (fusee_handlers_testapp) parks on its wait for signal `finish` in one
process, with one update applied there; that process then goes away (Ctrl-C, which
closes the home cleanly, or SIGKILL). Then, with no owner, `fusee query` answers
from the run replayed in memory and `fusee update` drives the home until the update
is applied; a `fusee serve` opened afterwards answers both as soon as it says it
serves; so does one that opens the home after the owner was killed. Each test ends
the run (`fusee signal ID finish`, `fusee result ID --wait`) and reads its journal:
each update applied once, in order, and the step of an async update ran once (its
side ledger, written by the step's function in whichever process ran it).
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from fusee_handlers_testapp import check_journal, ledger_of  # tests/cli is on the path

APP = "fusee_handlers_testapp"
MODES = ["plain", "async"]
"""How the run's `put` handler is written: a `def`, or an `async def` awaiting a step."""


@dataclass
class Box:
    """Run `id` of `hr_box` in `home`, and the `fusee` commands that act on it."""

    fusee: Callable[..., subprocess.CompletedProcess[str]]
    spawn: Callable[..., subprocess.Popen[str]]
    home: Path
    ledger: Path
    id: str
    mode: str

    @property
    def on(self) -> list[str]:
        return ["--home", str(self.home), "--app", APP]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.fusee(*args, *self.on, HR_LEDGER=str(self.ledger))

    def ok(self, *args: str) -> str:
        """The stdout of `fusee ARGS`, which must exit 0."""
        done = self.run(*args)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout

    def query(self) -> Any:
        return orjson.loads(self.ok("query", self.id, "get"))

    def update(self, n: int) -> Any:
        return orjson.loads(self.ok("update", self.id, "put", str(n)))

    def start_detached(self) -> None:
        """`fusee start --detach`: the start is durable; no code runs in that process."""
        started = self.ok("start", "hr_box", "--input", self.input, "--id", self.id, "--detach")
        assert started == f"{self.id}\n"

    @property
    def input(self) -> str:
        return json.dumps(self.mode)

    def owner(self) -> subprocess.Popen[str]:
        """`fusee start` (not detached), once it says the run waits for `finish`: it owns
        the home and drives the run."""
        start = ["start", "hr_box", "--input", self.input, "--id", self.id]
        owner = self.spawn(*start, *self.on, HR_LEDGER=str(self.ledger))
        assert owner.stderr is not None
        first = owner.stderr.readline()
        assert first.startswith(f"started {self.id} (hr_box, run "), first
        waiting = owner.stderr.readline()
        assert waiting == f"{self.id}: waiting for signal 'finish'\n", waiting
        return owner

    def serve(self, runs_open: int = 1) -> subprocess.Popen[str]:
        """`fusee serve`, once it prints that it serves (its first line), with
        `runs_open` runs open."""
        child = self.spawn("serve", *self.on, HR_LEDGER=str(self.ledger))
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            _, err = child.communicate()
            raise AssertionError(f"fusee serve exited {child.returncode}: {err}")
        event = orjson.loads(line)
        assert event["event"] == "serving", event
        assert event["runs_open"] == runs_open, event
        return child

    def stamped(self) -> list[int]:
        """The arguments of the executions of the async update's step, in order."""
        return [entry["n"] for entry in ledger_of(self.ledger)]

    def finish(self, items: list[int]) -> None:
        """Ends the run (signal `finish`, `result --wait`) and checks that its result and
        its journal hold each update in `items` once, in order."""
        self.ok("signal", self.id, "finish", "true")
        done = json.loads(self.ok("result", self.id, "--wait", "--json"))
        assert done["status"] == "completed", done
        records = json.loads(self.ok("history", self.id, "--json"))
        check_journal(self.mode, done["result"], records, self.stamped(), items)


@pytest.fixture
def box(
    mode: str,
    fusee: Callable[..., subprocess.CompletedProcess[str]],
    spawn: Callable[..., subprocess.Popen[str]],
    tmp_path: Path,
) -> Box:
    """A run of `hr_box` to come, whose `put` handler is of the test's `mode`."""
    return Box(fusee, spawn, tmp_path / "home", tmp_path / "ledger.jsonl", "hr-1", mode)


def detach(owner: subprocess.Popen[str]) -> None:
    """Ctrl-C to a `fusee start` that follows its run: it closes the home and exits 0."""
    owner.send_signal(signal.SIGINT)
    _, err = owner.communicate()
    assert owner.returncode == 0, err
    assert "detached: run hr-1 is durable and resumes when the home is next opened" in err


def kill(owner: subprocess.Popen[str]) -> None:
    owner.send_signal(signal.SIGKILL)
    owner.communicate()
    assert owner.returncode == -signal.SIGKILL


def stop(server: subprocess.Popen[str]) -> None:
    """SIGTERM to a `fusee serve`: it stops cleanly, exit 0."""
    server.send_signal(signal.SIGTERM)
    _, err = server.communicate()
    assert server.returncode == 0, err


@pytest.mark.parametrize("mode", MODES)
def test_with_no_owner_a_parked_run_answers_a_query_and_an_update(box: Box) -> None:
    owner = box.owner()
    assert box.update(4) == 1  # applied by the owner, where the run waits
    detach(owner)

    # No process owns the home: the query replays the run here, the update drives it.
    assert box.query() == [4]
    assert box.stamped() == ([4] if box.mode == "async" else [])  # the replay ran no step
    assert box.update(5) == 2
    assert box.query() == [4, 5]
    assert not (box.home / "control.sock").exists()  # the update's process went away
    box.finish([4, 5])


@pytest.mark.parametrize("mode", MODES)
def test_a_run_started_detached_and_never_run_answers_with_no_owner(box: Box) -> None:
    box.start_detached()  # recorded only: the run's code has not run anywhere

    assert box.query() == []
    assert box.update(5) == 1
    assert box.query() == [5]
    box.finish([5])


@pytest.mark.parametrize("mode", MODES)
def test_a_serve_opened_after_the_owner_left_answers_at_once(box: Box) -> None:
    owner = box.owner()
    assert box.update(4) == 1
    detach(owner)

    server = box.serve()
    # Asked as soon as it serves: before or while the run's code replays there.
    assert box.query() == [4]
    assert box.update(5) == 2
    assert box.query() == [4, 5]
    box.finish([4, 5])
    stop(server)


@pytest.mark.parametrize("owned_by", ["start", "serve"])
@pytest.mark.parametrize("mode", MODES)
def test_after_the_owner_is_killed_a_new_serve_answers_at_once(box: Box, owned_by: str) -> None:
    if owned_by == "start":
        owner = box.owner()
    else:
        owner = box.serve(runs_open=0)
        box.start_detached()  # through the serve, which drives the run to its wait
    assert box.update(4) == 1  # durable once answered
    kill(owner)

    server = box.serve()
    assert box.update(5) == 2  # asked as soon as it serves
    assert box.query() == [4, 5]
    assert box.update(6) == 3
    kill(server)  # and once more, after updates applied in this life

    server = box.serve()
    assert box.query() == [4, 5, 6]
    assert box.update(7) == 4
    box.finish([4, 5, 6, 7])
    stop(server)


@pytest.mark.parametrize("mode", MODES)
def test_the_handlers_answer_through_each_way_in_one_after_another(box: Box) -> None:
    owner = box.owner()
    assert box.update(4) == 1
    detach(owner)
    assert box.update(5) == 2  # with no owner: this command drives the home
    assert box.query() == [4, 5]  # with no owner: replayed here

    server = box.serve()
    assert box.query() == [4, 5]  # as soon as it serves
    assert box.update(6) == 3
    kill(server)

    server = box.serve()
    assert box.update(7) == 4  # as soon as it serves, after a SIGKILL
    assert box.query() == [4, 5, 6, 7]
    box.finish([4, 5, 6, 7])
    stop(server)
