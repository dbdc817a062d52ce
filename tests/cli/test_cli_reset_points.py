"""`fusee reset --to` takes what `fusee history` shows: positions, and the names of waits,
sleeps, children and completions as well as steps; a reset child stays its parent's.

The run here (`cli_reset_family`, in fusee_reset_testapp) started two children
and called no step: before, `--to` took neither its positions nor its waits
or children, and its error said "it has called no step".
"""

from __future__ import annotations

import asyncio
import json

import pytest

APP = "fusee_reset_testapp"


@pytest.fixture
def on(home) -> list[str]:
    return ["--home", str(home), "--app", APP]


@pytest.fixture
def family(make_engine, home, journal):
    """Run f-1 parked on its wait, with its children f-1-a and f-1-b parked; the journal."""
    import fusee_reset_testapp  # noqa: F401  (registers its workflows)

    async def park() -> None:
        async with make_engine() as engine:
            await engine.start("cli_reset_family", None, id="f-1")

            def parked(id: str) -> bool:
                return id in engine.runs.newest and engine.runs.newest[id].live.parked

            await engine.wait_until(lambda: all(parked(i) for i in ("f-1", "f-1-a", "f-1-b")))

    asyncio.run(park())
    return journal(home)


def test_an_unknown_point_lists_the_children_waits_and_positions(
    cli, on, home, family, journal, bad_input
):
    r = cli("reset", "f-1", "--to", "nosuch", *on)
    line = bad_input(r, 2, "run 'f-1' has no operation named 'nosuch'")
    assert line.endswith(
        "--to takes an operation number from 1 to 3; a position inside one (1.0.1, 1.1.1), "
        "which resets to that operation; or the name of a wait (go) or a child (f-1-a, f-1-b)"
    )
    assert "no step" not in line
    bad_input(cli("reset", "f-1", "--to", "1.2.1", *on), 2, "no operation at position '1.2.1'")
    assert journal(home) == family


def test_a_position_history_shows_resets_to_its_top_level_operation(cli, on, family):
    table = cli("history", "f-1", *on, env={"COLUMNS": "200"})
    assert "1.1.1" in table.stdout  # the seq column, as --to takes it
    r = cli("reset", "f-1", "--to", "1.1.1", *on)
    assert r.exit_code == 0, r.output
    assert (
        "keeps operations before #1 (position 1.1.1 is inside operation #1: it runs again "
        "whole) and runs the rest"
    ) in r.stderr
    recs = json.loads(cli("history", "f-1", "--json", *on).stdout)
    (started,) = [rec for rec in recs if rec["run_id"] == r.stdout.strip()]
    assert started["origin"]["before"] == 1


@pytest.mark.parametrize(("to", "before"), [("go", 2), ("f-1-b", 1), ("f-1-a", 1), ("2", 2)])
def test_a_wait_or_a_child_is_found_by_name(cli, on, family, to, before):
    r = cli("reset", "f-1", "--to", to, "--json", *on)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["origin"]["before"] == before


def test_a_reset_child_stays_its_parents_child(cli, on, family):
    old = json.loads(cli("describe", "f-1-a", "--json", *on).stdout)
    r = cli("reset", "f-1-a", "--to", "done", *on)
    assert r.exit_code == 0, r.output
    new = r.stdout.strip()
    assert r.stderr.rstrip().endswith("; it is still a child of f-1")
    kids = json.loads(cli("list", "--parent", "f-1", "--json", *on).stdout)
    assert {(k["id"], k["run_id"], k["status"]) for k in kids if k["id"] == "f-1-a"} == {
        ("f-1-a", old["run_id"], "reset"),
        ("f-1-a", new, "running"),
    }
    assert json.loads(cli("describe", "f-1-a", "--json", *on).stdout)["parent"] == old["parent"]
    table = cli("history", "f-1-a", *on, env={"COLUMNS": "250"}).stdout
    assert (
        f"(reset of run {old['run_id']}, from operation #1; child of f-1, operation #1.0.1)"
        in table
    )
    # The parent was told nothing: it still waits for that child (now the new run).
    parent = json.loads(cli("history", "f-1", "--json", *on).stdout)
    assert "ChildClosed" not in [rec["type"] for rec in parent]
    assert cli("signal", "f-1-a", "done", '"again"', *on).exit_code == 0
    assert json.loads(cli("result", "f-1-a", "--wait", *on).stdout) == "again"
    parent = json.loads(cli("history", "f-1", "--json", *on).stdout)
    (told,) = [rec for rec in parent if rec["type"] == "ChildClosed"]
    assert (told["child_run_id"], told["status"], told["result"]) == (new, "completed", "again")
