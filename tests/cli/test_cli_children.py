"""Parents and children from the command line (issue 18): the README's example,
`describe` and `list --parent`, `history`, and the CLI's terminate and cancel of a
parent applying `parent_close` to its children. Real `fusee` processes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import APP

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_example_ships_parcels_as_children(fusee, tmp_path: Path) -> None:
    on = ["--home", str(tmp_path / "home")]
    readme = (REPO / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("fusee start shipment"))
    done = fusee(*shlex.split(line)[1:], *on)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [p["item"] for p in result["shipped"]] == ["books", "rug"]
    assert result["refunded"] == ["refunded fragile-glass of o-7"]

    kids = json.loads(fusee("list", "--parent", "o-7", "--json", *on).stdout)
    parent = json.loads(fusee("describe", "o-7", "--json", *on).stdout)
    assert sorted((k["id"], k["status"]) for k in kids) == [
        ("o-7-books", "completed"),
        ("o-7-fragile-glass", "failed"),
        ("o-7-rug", "completed"),
    ]
    assert {k["parent"]["run_id"] for k in kids} == {parent["run_id"]}
    assert parent["parent"] is None

    shown = fusee("describe", "o-7", *on, COLUMNS="100").stdout
    assert "child     o-7-fragile-glass failed (parcel)" in shown
    child = fusee("describe", "o-7-rug", *on, COLUMNS="100").stdout
    assert f"parent    o-7 (run {parent['run_id']})" in child

    history = fusee("history", "o-7", *on, COLUMNS="200").stdout
    assert "ChildStarted" in history and "child o-7-books (run " in history
    assert "child failed: StepFailed: step 'pack' failed: ValueError" in history
    assert fusee("list", "--parent", "o-7-rug", *on).stderr.strip() == "no runs"


@pytest.mark.parametrize(
    ("command", "status"), [("terminate", "terminated"), ("cancel", "cancelled")]
)
def test_closing_a_parent_from_the_cli_applies_parent_close(
    fusee, tmp_path: Path, command: str, status: str
) -> None:
    on = ["--home", str(tmp_path / "home"), "--app", APP]
    started = fusee("start", "cli_family", "--input", '"terminate"', "--id", "fam", "--detach", *on)
    assert started.returncode == 0, started.stderr
    # Driven (a second at a time, as long as it takes) until both wait for "go".
    for _ in range(60):
        drive = fusee("result", "fam", "--wait", "--timeout", "1", *on)
        assert drive.returncode == 4, drive.stderr  # still open
        kid = fusee("describe", "fam-kid", "--json", *on)
        if kid.returncode == 0 and json.loads(kid.stdout)["status"] == "parked":
            break
    else:
        raise AssertionError("the child never got to its wait")

    closed = fusee(command, "fam", *on)
    assert closed.returncode == 0, closed.stderr
    fusee("result", "fam", "--wait", "--timeout", "5", *on)  # drives the parent's close
    parent = json.loads(fusee("describe", "fam", "--json", *on).stdout)
    kid = json.loads(fusee("describe", "fam-kid", "--json", *on).stdout)
    assert parent["status"] == status
    assert kid["status"] == "terminated"
    assert kid["error"].startswith(f"terminated: its parent 'fam' closed ({status})")


def test_describe_lists_the_first_children_and_says_how_many_more(fusee, tmp_path: Path) -> None:
    on = ["--home", str(tmp_path / "home")]
    parcels = [f"p{i:02d}" for i in range(22)]
    value = json.dumps({"order": "big", "parcels": parcels})
    done = fusee("start", "shipment", "--input", value, "--id", "big", *on)
    assert done.returncode == 0, done.stderr
    shown = fusee("describe", "big", *on, COLUMNS="100").stdout
    listed = [line.split()[1] for line in shown.splitlines() if line.startswith("child ")]
    assert listed == [*(f"big-{p}" for p in parcels[:20]), "2"]
    assert "2 more: fusee list --parent big --limit 0" in shown
