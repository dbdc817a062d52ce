"""Values on the command line: `start --input` as a file, stdin or JSON text, and
VALUE arguments that start like JSON but do not parse refused with the parser's position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"id": "o-2"}', {"id": "o-2"}),
        ("[1, 2]", [1, 2]),
        ('"text"', "text"),
        ("42", 42),
        ("null", None),
        ('{"path": "a/b/c.json"}', {"path": "a/b/c.json"}),  # looks like a path in a folder
        (json.dumps({"note": "x" * 600}), {"note": "x" * 600}),  # too long for a file name
    ],
)
def test_start_takes_json_text_as_input(cli, on, text, value):
    r = cli("start", "cli_echo", "--input", text, "--id", "e-1", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == value


def test_an_existing_file_wins_over_json_text(
    cli, on, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    Path("7").write_text('"from the file"')
    r = cli("start", "cli_echo", "--input", "7", "--id", "e-1", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == "from the file"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("order.jsn", "line 1, column 1"),
        ('{"id": "o-2",}', "line 1, column 13"),
        ('{\n  "id": tru\n}', "line 2, column"),
    ],
)
def test_input_neither_a_file_nor_json_says_both(cli, on, home, bad_input, text, where):
    line = bad_input(cli("start", "cli_echo", "--input", text, *on), 2)
    assert "does not exist" in line and "not JSON" in line, line
    assert where in line
    assert not home.exists()


@pytest.mark.parametrize("value", ['{"ok": tru', "[1, 2", '"unterminated', '  {"a"}'])
def test_a_signal_value_that_starts_like_json_must_parse(
    cli, on, home, waiting, journal, bad_input, value
):
    line = bad_input(cli("signal", "w-1", "go", value, *on), 2, "starts like JSON", "not JSON")
    assert "(line 1, column " in line
    assert journal(home) == waiting


def test_a_plain_word_is_still_a_string(cli, on, waiting):
    r = cli("signal", "w-1", "go", "approve", *on)
    assert r.exit_code == 0, r.output
    assert "(VALUE is not JSON: sent as a string)" in r.stderr
    assert json.loads(cli("result", "w-1", "--wait", *on).stdout) == "approve"


def test_a_completion_value_that_starts_like_json_must_parse(cli, on, home, bad_input):
    # Without the check, the token is looked up (exit 3): the value is refused first.
    line = bad_input(
        cli("complete", "4f1c2b7e", '{"approved": tru', *on), 2, "starts like JSON", "not JSON"
    )
    assert "(line 1, column 17)" in line
    assert not home.exists()


@pytest.mark.parametrize("command", ["query", "update"])
def test_a_handler_arg_that_starts_like_json_must_parse(cli, on, home, bad_input, command):
    line = bad_input(cli(command, "w-1", "total", "[1,", *on), 2, "starts like JSON")
    assert "(line 1, column " in line
    assert not home.exists()
