"""`update`: refused, exit 2, until the engine has its feature."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

UNAVAILABLE = [
    (
        ["update", "h-1", "set-limit", "500", "--update-id", "u-1"],
        "fusee update is not available yet",
        "ctx.on_update",
    ),
]


@pytest.mark.parametrize(("args", "what", "why"), UNAVAILABLE)
@pytest.mark.parametrize("as_json", [False, True])
def test_exits_2_in_one_line_without_creating_the_home(
    cli, on, home, bad_input, args, what, why, as_json
):
    extra = ["--json"] if as_json else []
    bad_input(cli(*args, *extra, *on), 2, what, why, "in this version")
    assert not home.exists()


@pytest.mark.parametrize(("args", "what", "why"), UNAVAILABLE)
def test_leaves_a_used_home_as_it_is(cli, on, home, journal, bad_input, args, what, why):
    assert cli("start", "cli_hang", "--id", "h-1", "--detach", *on).exit_code == 0
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    segments = journal(home)
    bad_input(cli(*args, *on), 2, what)
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
    assert journal(home) == segments


def test_the_refusal_imports_no_engine():
    # Refusing needs nothing but typer: the engine is not imported, let alone opened.
    code = (
        "import sys\n"
        "from fusee_cli.app import app\n"
        "for args in (['update', 'i', 'n'],):\n"
        "    try:\n"
        "        app(args, prog_name='fusee')\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 2, e.code\n"
        "print([m for m in sys.modules if m.split('.')[0] == 'fusee_runtime'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
    assert done.stderr.count("error: ") == 1
