"""`fusee --version`, and `--home`/`--app` before the command as well as after it."""

from __future__ import annotations

import json
import os
from importlib.metadata import version

import pytest
from conftest import APP


def ids(result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [run["id"] for run in json.loads(result.stdout)]


@pytest.fixture
def ran(cli, home):
    """Run e-1 of cli_echo, started with the global options before the command."""
    r = cli(
        "--home",
        str(home),
        "--app",
        APP,
        "start",
        "cli_echo",
        "--input",
        "-",
        "--id",
        "e-1",
        input='"x"',
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == "x"
    assert (home / "journal").is_dir()


def test_version_prints_the_installed_version(cli):
    r = cli("--version")
    assert r.exit_code == 0, r.output
    assert r.stdout == f"fusee {version('fusee')}\n"


def test_version_from_the_real_command(fusee):
    done = fusee("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"fusee {version('fusee')}\n"
    assert done.stderr == ""


def test_root_help_shows_the_global_options(cli):
    r = cli("--help")
    assert r.exit_code == 0, r.output
    for option in ("--home", "--app", "--version"):
        assert option in r.stdout


def test_home_and_app_before_the_command(cli, home, ran):
    assert ids(cli("--home", str(home), "--app", APP, "list", "--json")) == ["e-1"]


def test_home_and_app_after_the_command_still_work(cli, home, ran):
    assert ids(cli("list", "--home", str(home), "--app", APP, "--json")) == ["e-1"]


def test_the_option_after_the_command_wins(cli, home, tmp_path, ran):
    elsewhere = tmp_path / "elsewhere"
    r = cli(
        "--home",
        str(elsewhere),
        "--app",
        "no_such_module",
        "list",
        "--home",
        str(home),
        "--app",
        APP,
        "--json",
    )
    assert ids(r) == ["e-1"]
    assert not elsewhere.exists()


def test_the_option_before_the_command_wins_over_the_variable(cli, home, tmp_path, ran):
    elsewhere = tmp_path / "elsewhere"
    env = {"FUSEE_HOME": str(elsewhere), "FUSEE_APP": "no_such_module"}
    assert ids(cli("--home", str(home), "--app", APP, "list", "--json", env=env)) == ["e-1"]
    assert not elsewhere.exists()


def test_the_variables_still_work(cli, home, ran):
    env = {"FUSEE_HOME": str(home), "FUSEE_APP": APP}
    assert ids(cli("list", "--json", env=env)) == ["e-1"]


def test_app_before_the_command_is_the_one_loaded(cli, home):
    r = cli(
        "--app",
        "no_such_module",
        "--home",
        str(home),
        "start",
        "cli_echo",
        "--id",
        "e-2",
        "--input",
        "-",
        input='"x"',
    )
    assert r.exit_code != 0
    assert "no_such_module" in r.stderr


def test_global_options_do_not_leak_into_the_process(cli, home, ran):
    assert "FUSEE_HOME" not in os.environ and "FUSEE_APP" not in os.environ
    cli("--home", str(home), "--app", APP, "list")
    assert "FUSEE_HOME" not in os.environ and "FUSEE_APP" not in os.environ


def test_global_options_leave_a_variable_as_it_was(cli, home, monkeypatch, ran):
    monkeypatch.setenv("FUSEE_HOME", "somewhere")
    assert ids(cli("--home", str(home), "--app", APP, "list", "--json")) == ["e-1"]
    assert os.environ["FUSEE_HOME"] == "somewhere"


def test_global_options_without_a_command_ask_for_one(cli, home):
    r = cli("--home", str(home))
    assert r.exit_code == 2
    assert "Missing command" in r.stderr
