"""Bad input: one clear line on stderr, exit 2, no traceback, the journal untouched."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from fusee_runtime.control import connect
from fusee_runtime.engine.home import HomeLock

ACTS = (
    ["signal", "h-1", "go", "1"],
    ["resume", "h-1"],
    ["cancel", "h-1"],
    ["terminate", "h-1"],
    ["reset", "h-1", "--to", "1"],
)
"""The commands that act on run h-1 of `used_home`."""


@pytest.fixture
def used_home(cli, on, home, journal):
    """A home whose journal already holds a run; returns its segments' bytes."""
    assert cli("start", "cli_hang", "--id", "h-1", "--detach", *on).exit_code == 0
    before = journal(home)
    assert before
    return before


def test_unknown_workflow_lists_the_known_ones(cli, on, home, journal, used_home, bad_input):
    line = bad_input(cli("start", "nope", *on), 2, "unknown workflow 'nope'", "known workflows:")
    assert "cli_echo" in line and "cli_hang" in line
    assert journal(home) == used_home


def test_unknown_workflow_in_a_fresh_home_creates_nothing(cli, on, home, bad_input):
    bad_input(cli("start", "nope", *on), 2, "unknown workflow 'nope'")
    assert not home.exists()


def test_missing_input_file(cli, on, home, journal, used_home, bad_input, tmp_path: Path):
    missing = tmp_path / "absent.json"
    bad_input(
        cli("start", "cli_echo", "--input", str(missing), *on), 2, str(missing), "does not exist"
    )
    assert journal(home) == used_home


def test_input_that_is_not_json_names_file_line_and_column(
    cli, on, home, journal, used_home, bad_input, tmp_path: Path
):
    path = tmp_path / "order.json"
    path.write_text('{\n  "id": "o-1",,\n}\n')
    line = bad_input(cli("start", "cli_echo", "--input", str(path), *on), 2, "is not JSON")
    assert str(path) in line
    assert "line 2, column 15" in line
    assert journal(home) == used_home


def test_stdin_that_is_not_json(cli, on, home, bad_input):
    bad_input(cli("start", "cli_echo", "--input", "-", *on, input="nope"), 2, "stdin is not JSON")
    assert not home.exists()


def test_an_input_directory_is_refused(cli, on, home, bad_input, tmp_path: Path):
    bad_input(cli("start", "cli_echo", "--input", str(tmp_path), *on), 2, "cannot read input")
    assert not home.exists()


def test_an_app_that_fails_to_import_shows_the_import_error(
    cli, home, journal, used_home, bad_input, tmp_path: Path, monkeypatch
):
    name = f"broken_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("raise RuntimeError('no database configured')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for command in (["start", "cli_echo"], ["result", "h-1"], *ACTS):
        r = cli(*command, "--home", str(home), "--app", name)
        bad_input(
            r, 2, f"cannot import app module {name!r}", "RuntimeError: no database configured"
        )
    # Reading the home imports none of the app's code: a broken app (or a slow
    # one) does not keep anyone from looking at the runs.
    for command in (["describe", "h-1"], ["list"], ["history", "h-1"]):
        r = cli(*command, "--home", str(home), "--app", name)
        assert r.exit_code == 0, r.output
        assert "h-1" in r.output
    assert journal(home) == used_home


def test_a_missing_app_module(cli, home, bad_input):
    r = cli("start", "order", "--home", str(home), "--app", "no_such_module_here")
    line = bad_input(r, 2, "cannot import app module 'no_such_module_here'", "ModuleNotFoundError")
    # Where the app is named, for a module that is not there at all (outside a project,
    # the default `workflows` is not).
    assert '--app MODULE, FUSEE_APP, or app = "MODULE" under [tool.fusee]' in line
    r = cli("workflows", "--app", "no_such_package.app")
    assert "--app MODULE" in bad_input(r, 2, "cannot import app module 'no_such_package.app'")
    assert not home.exists()


def test_an_app_whose_own_import_is_missing_gets_no_hint_of_where_the_app_is_named(
    cli, home, bad_input, tmp_path, monkeypatch
):
    (tmp_path / "app_needing_a_lib.py").write_text("import no_such_lib_of_theirs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = cli("workflows", "--app", "app_needing_a_lib")
    line = bad_input(r, 2, "No module named 'no_such_lib_of_theirs'")
    assert "--app MODULE" not in line


def test_a_locked_home_names_the_owner(cli, on, home, journal, used_home, bad_input, monkeypatch):
    # A process holds the lock and serves no control socket: each command
    # waits for it for LOCK_WAIT_S (a minute; shortened here), then names it.
    monkeypatch.setattr(connect, "LOCK_WAIT_S", 0.2)
    lock = HomeLock(home)
    lock.acquire()
    try:
        for command in (["start", "cli_echo"], ["describe", "h-1"], ["result", "h-1"], *ACTS):
            r = cli(*command, *on)
            owned = f"home {home} is owned by pid {lock.owner()}"
            bad_input(r, 2, owned, "has held it for 0.2 s without serving it")
    finally:
        lock.release()
    assert journal(home) == used_home


def test_a_bad_id(cli, on, home, bad_input):
    bad_input(cli("start", "cli_echo", "--id", "a/b", *on), 2, "may not contain '/'")
    assert not home.exists()


def test_an_unknown_status(cli, on, home, used_home, journal, bad_input):
    bad_input(cli("list", "--status", "done", *on), 2, "unknown status 'done'", "completed")
    assert journal(home) == used_home


def test_a_bad_pyproject(cli, bad_input, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.fusee\n")
    bad_input(cli("start", "order"), 2, "cannot read pyproject.toml")
    assert not (tmp_path / ".fusee").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["start"],
        ["start", "cli_echo", "--timeout", "soon"],
        ["result"],
        ["signal", "h-1"],
        ["reset", "h-1"],
        ["cancel"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2_without_a_traceback(cli, on, home, args):
    r = cli(*args, *on)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert r.stdout == ""
    assert not home.exists()


def test_an_input_over_the_payload_limit(cli, on, home, bad_input, tmp_path: Path):
    path = tmp_path / "big.json"
    path.write_text('"' + "x" * (5 << 20) + '"')
    bad_input(cli("start", "cli_echo", "--input", str(path), *on), 2, "over the limit")
    assert not home.exists()
