"""What `list`, `history` and `describe` show on a terminal (issue 17, items 1 to 3).

Each command runs as a child process whose stdout is a real
pseudo-terminal of 50, 80 or 200 columns; `screen` replays what it wrote
the way a terminal would. Ids (a workflow id and every run id) are never
cut, whatever the width; no line is wider than the terminal; a failure
shows the line of code that raised it, and `--verbose` its traceback; an
open run says what it waits for.
"""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE
from processes import fusee_script
from test_cli_terminal import REPO, screen

from fusee_runtime import Status

LONG_ID = "order-2026-12-03-customer-000047"
LONG_VALUE = "x" * 150


@pytest.fixture
def shelf(make_engine, home: Path) -> dict[str, Any]:
    """A home with a reset run (two runs of LONG_ID), a failed run, a run parked on a
    signal and a paused one; returns the run ids of LONG_ID."""

    async def fill() -> list[str]:
        async with make_engine() as engine:
            first = await engine.start("cli_echo", LONG_VALUE, id=LONG_ID)
            await first.result()
            await engine.reset(LONG_ID, 1)
            await engine.start("cli_fail", {"cents": 5}, id="f-1")
            await engine.start("cli_wait", None, id="w-1")
            await engine.start("cli_pause", None, id="p-1")
            await engine.wait_until(
                lambda: (
                    [engine.runs.latest(i).status for i in ("f-1", "w-1", "p-1")]
                    == [Status.FAILED, Status.PARKED, Status.PAUSED]
                    and not engine.runs.latest(LONG_ID).is_open
                )
            )
            return [r["run_id"] for r in await engine.history(LONG_ID) if r["type"] == "RunStarted"]

    return {"home": home, "run_ids": asyncio.run(fill())}


def on_terminal(columns: int, *args: str) -> list[str]:
    """What `fusee ARGS` shows on a terminal `columns` wide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.pop("NO_COLOR", None)
    env.update(TERM="xterm", COLUMNS=str(columns), LINES="50")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    leader, terminal = pty.openpty()
    child = subprocess.Popen(
        [fusee_script(), *args], cwd=REPO, env=env, stdout=terminal, stderr=subprocess.PIPE
    )
    os.close(terminal)
    raw = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child exited and closed the terminal
            chunk = b""
        if not chunk:
            break
        raw += chunk
    os.close(leader)
    _, err = child.communicate()
    assert child.returncode == 0, err.decode()
    lines = [line.rstrip() for line in screen(raw)]
    assert all(len(line) <= columns for line in lines), "\n".join(lines)
    return lines


def args(shelf: dict[str, Any], *command: str) -> list[str]:
    return [*command, "--home", str(shelf["home"]), "--app", "fusee_cli_testapp"]


def shows_whole(lines: list[str], *ids: str) -> None:
    text = "\n".join(lines)
    for id in ids:
        assert any(id in line for line in lines), f"{id} cut or missing in:\n{text}"


@pytest.mark.parametrize("columns", [50, 80, 200])
def test_list_never_cuts_an_id_and_shows_each_run(shelf, columns):
    lines = on_terminal(columns, *args(shelf, "list"))
    shows_whole(lines, LONG_ID, *shelf["run_ids"], "f-1", "w-1", "p-1")
    assert len(shelf["run_ids"]) == 2  # the reset made a second run: both rows tell apart


@pytest.mark.parametrize("columns", [50, 80])
def test_describe_says_what_a_run_waits_for(shelf, columns):
    lines = on_terminal(columns, *args(shelf, "describe", "w-1"))
    text = " ".join(" ".join(lines).split())
    assert "waits for signal 'go' (no timeout)" in text
    paused = " ".join(" ".join(on_terminal(columns, *args(shelf, "describe", "p-1"))).split())
    assert "resume of paused step 'wobble'" in paused
    assert "ConnectionError: wobbly service" in paused


def test_list_shows_what_runs_wait_for_in_a_column_on_a_wide_terminal(shelf):
    lines = on_terminal(200, *args(shelf, "list"))
    assert "waits for" in lines[0]
    (row,) = [line for line in lines if line.startswith("w-1 ")]
    assert row.endswith("signal 'go' (no timeout)")


@pytest.mark.parametrize("columns", [50, 80, 200])
def test_a_failure_shows_where_it_was_raised_and_verbose_shows_the_traceback(shelf, columns):
    folded = on_terminal(columns, *args(shelf, "history", "f-1"))
    text = " ".join(" ".join(folded).split())
    assert "at fusee_cli_testapp.py:" in text and " in decline" in text
    assert "Traceback (most recent call last)" not in text

    verbose = on_terminal(columns, *args(shelf, "history", "f-1", "--verbose"))
    whole = " ".join(" ".join(verbose).split())  # lines a narrow terminal wrapped, joined
    assert "Traceback (most recent call last):" in whole
    assert 'raise Fatal(f"card declined for {cents} cents")' in whole

    described = " ".join(" ".join(on_terminal(columns, *args(shelf, "describe", "f-1"))).split())
    assert "in decline" in described and "Fatal: card declined for 5 cents" in described


@pytest.mark.parametrize("columns", [50, 80])
def test_history_on_a_narrow_terminal_keeps_details_whole(shelf, columns):
    lines = on_terminal(columns, *args(shelf, "history", LONG_ID))
    shows_whole(lines, *shelf["run_ids"])
    # The 150-character input is there whole, wrapped over lines, not squeezed into
    # fragments of a column or cut.
    assert "".join(line.strip() for line in lines).count(LONG_VALUE) >= 1


def test_a_value_is_not_cut_at_a_fixed_length_on_a_wide_terminal(shelf):
    lines = on_terminal(200, *args(shelf, "history", LONG_ID))
    # The value wraps in its column, whole: every copy of it adds up to 150 x's.
    assert not any("…" in line for line in lines)
    xs = sum(line.count("x") for line in lines)
    assert xs > 0 and xs % len(LONG_VALUE) == 0
