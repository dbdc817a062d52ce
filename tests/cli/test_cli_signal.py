"""`fusee signal`: a durable signal, recorded without running anyone's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def types(cli, on, workflow_id: str) -> list[str]:
    r = cli("history", workflow_id, "--json", *on)
    assert r.exit_code == 0, r.output
    return [rec["type"] for rec in json.loads(r.stdout)]


def test_a_signal_is_recorded_and_the_run_takes_it_when_driven(cli, on, waiting):
    r = cli("signal", "w-1", "go", '{"n": 1}', *on)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "delivered signal 'go' to w-1: {\"n\":1}; the run takes it when a process next "
        "drives the home: `fusee result w-1 --wait`"
    ]
    # Passive: the signal is durable, and no step of the run ran.
    assert "SignalReceived" in types(cli, on, "w-1")
    assert "StepCompleted" not in types(cli, on, "w-1")
    r = cli("result", "w-1", "--wait", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"n": 1}


def test_the_run_shows_as_parked_while_it_waits(cli, on, waiting):
    assert cli("signal", "w-1", "other", *on).exit_code == 0
    assert json.loads(cli("describe", "w-1", "--json", *on).stdout)["status"] == "parked"


@pytest.mark.parametrize(
    ("args", "value"),
    [
        (["true"], True),
        (["42"], 42),
        (["[1, 2]"], [1, 2]),
        (['"quoted"'], "quoted"),
        (["--", "-5"], -5),  # options go before the --
        ([], None),
    ],
)
def test_a_value_is_parsed_as_json(cli, on, waiting, args, value):
    r = cli("signal", *on, "w-1", "go", *args)
    assert r.exit_code == 0, r.output
    assert "sent as a string" not in r.stderr
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == value


def test_a_value_that_is_not_json_is_sent_as_a_string(cli, on, waiting):
    r = cli("signal", "w-1", "go", "yes please", *on)
    assert r.exit_code == 0, r.output
    assert '"yes please" (VALUE is not JSON: sent as a string)' in r.stderr
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == "yes please"


def test_a_value_from_a_file(cli, on, waiting, tmp_path: Path):
    path = tmp_path / "value.json"
    path.write_text('{"approved": true}\n')
    assert cli("signal", "w-1", "go", "--input", str(path), *on).exit_code == 0
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == {"approved": True}


def test_a_value_from_stdin(cli, on, waiting):
    assert cli("signal", "w-1", "go", "--input", "-", *on, input="[3]").exit_code == 0
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == [3]


def test_json_prints_what_was_delivered(cli, on, waiting):
    r = cli("signal", "w-1", "go", "1", "--json", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"id": "w-1", "signal": "go", "delivered": True}
    assert r.stderr == ""


def test_signals_wait_in_arrival_order(cli, on, waiting):
    for value in ("1", "2"):
        assert cli("signal", "w-1", "go", value, *on).exit_code == 0
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == 1


def test_an_unknown_id_exits_3(cli, on, home, waiting, journal, bad_input):
    bad_input(cli("signal", "nope", "go", *on), 3, "no run with id 'nope'")
    assert journal(home) == waiting


def test_an_unknown_id_in_a_home_never_opened_exits_3(cli, on, home, bad_input):
    bad_input(cli("signal", "nope", "go", "1", *on), 3, "no run with id 'nope'")
    assert not home.exists()


def test_a_closed_run_exits_2_naming_its_status(cli, on, home, journal, bad_input):
    assert cli("start", "cli_echo", "--id", "e-1", *on).exit_code == 0
    before = journal(home)
    line = bad_input(cli("signal", "e-1", "go", "1", *on), 2, "run 'e-1' is completed")
    assert "takes no more signals" in line
    assert journal(home) == before


def test_input_that_is_not_json_names_file_line_and_column(
    cli, on, home, waiting, journal, bad_input, tmp_path: Path
):
    path = tmp_path / "value.json"
    path.write_text('{\n  "ok": tru\n}\n')
    line = bad_input(cli("signal", "w-1", "go", "--input", str(path), *on), 2, "is not JSON")
    assert str(path) in line
    assert "line 2" in line and "column" in line
    assert journal(home) == waiting


@pytest.mark.parametrize(
    ("args", "stdin", "fragment"),
    [
        (["go", "1", "--input", "-"], "2", "as VALUE or with --input, not both"),
        (["go", "--input", "-"], "nope", "stdin is not JSON"),
        (["go", "--input", "/no/such/file.json"], None, "does not exist"),
        ([""], None, "a signal name is a non-empty string"),
        (["go", '"' + "x" * (5 << 20) + '"'], None, "over the limit"),
    ],
)
def test_bad_input_exits_2_and_records_nothing(
    cli, on, home, waiting, journal, bad_input, args, stdin, fragment
):
    bad_input(cli("signal", "w-1", *args, *on, input=stdin), 2, fragment)
    assert journal(home) == waiting


def test_a_bad_id_exits_2(cli, on, home, bad_input):
    bad_input(cli("signal", "a/b", "go", *on), 2, "may not contain '/'")
    assert not home.exists()
