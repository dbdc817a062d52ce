"""`fusee replay` and `fusee history --export` (issue 19, the replay checker): a deploy
checked against a home of hundreds of runs, open and closed, before it happens."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Config, Engine

FIELDS = ("id", "run_id", "workflow", "status", "ok", "seq", "op", "operations", "message")
"""What `fusee replay --json` gives per run (docs/json.md)."""
RUNS = 300
BROKEN = {f"p-{n}" for n in range(RUNS) if n % 7 == 0}
"""The runs v2 breaks: those that recorded step 'review' at operation #2."""
OPEN = {f"p-{n}" for n in range(RUNS) if n % 3 == 0}


def checksums(home: Path) -> dict[str, str]:
    """Every file of the home but LOCK, which holds the pid of the process that last
    took the home: each command that opens it, reads included, writes its own there."""
    assert re.fullmatch(rb"[0-9]+\n", (home / "LOCK").read_bytes())
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.rglob("*"))
        if p.is_file() and p.name != "LOCK"
    }


@pytest.fixture
def deployed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A home where v1 of `payment` ran 300 times (a third of them wait for `settle`),
    closed cleanly; the ledger its step functions wrote."""
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("REPLAY_LEDGER", str(ledger))
    monkeypatch.setenv("REPLAY_DEPLOY", "v1")
    home = tmp_path / "home"

    async def build() -> None:
        async with Engine(home, app="fusee_replay_testapp", config=Config()) as engine:
            handles = [await engine.start("payment", n, id=f"p-{n}") for n in range(RUNS)]
            for h in handles:
                if h.id not in OPEN:
                    await h.result()
            await engine.wait_until(lambda: all(engine.runs.latest(i).live.parked for i in OPEN))
            await engine.checkpoints.flush_history()

    asyncio.run(build())
    env = {"REPLAY_LEDGER": str(ledger)}
    on = ["--home", str(home), "--app", "fusee_replay_testapp"]
    return {"home": home, "ledger": ledger, "env": env, "on": on}


def test_replay_all_reports_exactly_the_runs_a_deploy_breaks_and_touches_nothing(
    fusee, deployed
) -> None:
    home, ledger = deployed["home"], deployed["ledger"]
    before, lines = checksums(home), ledger.read_text()
    assert len(lines.splitlines()) == RUNS + len(BROKEN)  # v1 ran: a charge each, the reviews

    same = fusee("replay", "--all", "--json", *deployed["on"], **deployed["env"])
    assert same.returncode == 0, same.stderr
    assert len(json.loads(same.stdout)) == RUNS
    assert all(r["ok"] for r in json.loads(same.stdout))
    assert same.stderr == f"replayed {RUNS} runs: {RUNS} replay cleanly, 0 do not\n"

    v2 = fusee("replay", "--all", "--json", *deployed["on"], **deployed["env"], REPLAY_DEPLOY="v2")
    assert v2.returncode == 1, v2.stderr
    found = json.loads(v2.stdout)
    assert sorted(r["id"] for r in found) == sorted(f"p-{n}" for n in range(RUNS))
    assert {r["id"] for r in found if not r["ok"]} == BROKEN
    for r in found:
        assert set(r) == set(FIELDS), r
        if r["id"] in BROKEN:
            assert (r["seq"], r["op"]) == (2, "2"), r
            assert r["message"] == (
                "replay mismatch at operation #2: the journal holds step 'review', "
                "the code asks for step 'manual_review'"
            )
            assert r["status"] == ("parked" if r["id"] in OPEN else "completed")
    # The patched receipt breaks none: closed runs take the old branch at their end,
    # open ones would record the marker where their journal ends.
    waiting = next(r for r in found if r["id"] == "p-3")
    assert waiting["message"] == (
        "replays cleanly up to operation #2 (wait 'settle'), where the journal ends"
    )
    done = next(r for r in found if r["id"] == "p-1")
    assert done["message"] == "replays cleanly: 1 operation, then the code returns"
    opened = fusee(
        "replay",
        "--all",
        "--open",
        "--json",
        *deployed["on"],
        **deployed["env"],
        REPLAY_DEPLOY="v2",
    )
    assert opened.returncode == 1
    assert {r["id"] for r in json.loads(opened.stdout)} == OPEN
    assert {r["id"] for r in json.loads(opened.stdout) if not r["ok"]} == BROKEN & OPEN
    table = fusee("replay", "--all", *deployed["on"], **deployed["env"], REPLAY_DEPLOY="v2")
    assert table.returncode == 1
    bad_lines = [line for line in table.stdout.splitlines() if line.startswith("MISMATCH")]
    assert len(bad_lines) == len(BROKEN)
    assert table.stderr.endswith(f"{RUNS - len(BROKEN)} replay cleanly, {len(BROKEN)} do not\n")

    assert checksums(home) == before, "the replays wrote nothing in the home"
    assert ledger.read_text() == lines, "no step function ran"


def test_replay_by_id_and_by_workflow(fusee, deployed) -> None:
    on, env = deployed["on"], {**deployed["env"], "REPLAY_DEPLOY": "v2"}
    some = fusee("replay", "p-7", "p-8", "--json", *on, **env)
    assert some.returncode == 1, some.stderr
    assert [(r["id"], r["ok"]) for r in json.loads(some.stdout)] == [("p-7", False), ("p-8", True)]
    fine = fusee("replay", "p-8", *on, **env)
    assert fine.returncode == 0, fine.stderr
    assert fine.stdout.startswith("ok       p-8 (payment, completed): replays cleanly")
    every = fusee("replay", "--workflow", "payment", "--json", *on, **env)
    assert len(json.loads(every.stdout)) == RUNS
    missing = fusee("replay", "nosuch", *on, **env)
    assert (missing.returncode, missing.stderr) == (3, "error: no run with id 'nosuch'\n")
    once = fusee("replay", "--all", "p-7", "--json", *on, **env)
    assert len(json.loads(once.stdout)) == RUNS, "p-7, named and in --all, is replayed once"
    alone = fusee("replay", "p-8", *on, **env)
    assert alone.stderr == "replayed 1 run: 1 replays cleanly, 0 do not\n"


def test_an_exported_history_replays_from_its_file(fusee, deployed, tmp_path: Path) -> None:
    on, env = deployed["on"], deployed["env"]
    golden = tmp_path / "p-14.json"
    wrote = fusee("history", "p-14", "--export", str(golden), *on, **env)
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stderr.startswith("wrote the journal of p-14 (run ")
    doc = json.loads(golden.read_text())
    assert (doc["format"], doc["version"], doc["id"], doc["workflow"]) == (
        "fusee.history",
        1,
        "p-14",
        "payment",
    )
    same = fusee("replay", "--history", str(golden), "--app", "fusee_replay_testapp", **env)
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("ok       p-14 (payment, completed): replays cleanly")
    v2 = fusee(
        "replay",
        "--history",
        str(golden),
        "--app",
        "fusee_replay_testapp",
        **env,
        REPLAY_DEPLOY="v2",
    )
    assert v2.returncode == 1
    assert "the journal holds step 'review', the code asks for step 'manual_review'" in v2.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read {path}: No such file or directory"),
        ("not json", "{path} is not JSON"),
        ('{"format": "other"}', "{path} is not a fusee history (fusee history ID --export FILE"),
        ('{"format": "fusee.history", "version": 9}', "{path} is a fusee history of version 9"),
        (
            '{"format": "fusee.history", "version": 1, "records": [[1, "x"]]}',
            "bad history file {path}: its id is missing",
        ),
    ],
)
def test_a_bad_history_file_is_one_line_and_exit_2(
    cli, bad_input, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "h.json"
    if content is not None:
        path.write_text(content)
    bad_input(
        cli("replay", "--history", str(path), "--app", "fusee_replay_testapp"),
        2,
        message.format(path=path),
    )


def test_replay_needs_to_be_told_what(cli, bad_input, home: Path, tmp_path: Path) -> None:
    on = ["--home", str(home), "--app", "fusee_replay_testapp"]
    bad_input(cli("replay", *on), 2, "name what to replay: workflow ids, --workflow NAME")
    bad_input(
        cli("replay", "p-1", "--history", "x.json", *on), 2, "--history replays files, not runs"
    )
    # A check that replays nothing by mistake is not a green check.
    bad_input(cli("replay", "--workflow", "paymnet", *on), 2, "unknown workflow 'paymnet'")
    bad_input(cli("replay", "p-1", "--open", *on), 2, "--open goes with --all or --workflow")
    bad_input(cli("replay", "--all", *on), 3, f"no fusee home at {home}: no run to replay")
    bad_input(cli("replay", "--history", str(tmp_path), *on), 2, f"cannot read {tmp_path}: Is a")
    bad_input(
        cli("history", "p-1", "--export", "x.json", "--json", *on),
        2,
        "--export writes the history document: not with --json or --verbose",
    )


def test_replay_and_export_go_through_the_process_that_owns_the_home(
    fusee, spawn, tmp_path: Path
) -> None:
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    owner = spawn("start", "approval", "--id", "ap-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started ap-1")
    assert owner.stderr.readline().startswith("ap-1: waiting for signal 'approve'")

    checked = fusee("replay", "--all", *on)
    exported = fusee("history", "ap-1", "--export", "-", *on)

    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == (
        "ok       ap-1 (approval, parked): replays cleanly up to operation #1 "
        "(wait 'approve'), where the journal ends\n"
    )
    assert exported.returncode == 0, exported.stderr
    doc = json.loads(exported.stdout)
    assert (doc["id"], doc["status"], len(doc["records"])) == ("ap-1", "parked", 2)
    fusee("signal", "ap-1", "approve", "true", *on)
    owner.communicate()
    assert owner.returncode == 0


def test_a_fix_for_a_stuck_run_is_checked_before_it_is_resumed(
    cli, on, make_stuck, testapp
) -> None:
    make_stuck()  # s-1 recorded step "a"; the code now asks for "b"
    assert cli("result", "s-1", "--wait", *on).exit_code == 1  # now stuck
    broken = cli("replay", "s-1", *on)
    assert broken.exit_code == 1, broken.output
    assert broken.stdout == (
        "MISMATCH s-1 (cli_shifty, stuck): replay mismatch at operation #1: the journal "
        "holds step 'a', the code asks for step 'b'\n"
    )
    testapp.SHAPE = "a"  # the fix
    fixed = cli("replay", "s-1", *on)
    assert fixed.exit_code == 0, fixed.output
    assert fixed.stdout == (
        "ok       s-1 (cli_shifty, stuck): replays cleanly up to operation #2 "
        "(step 'forever'), where the journal ends\n"
    )


def test_the_json_of_replay_is_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "json.md").read_text()
    section = text[text.index("## `fusee replay --json`") :]
    for name in FIELDS:
        assert f"| `{name}` |" in section, name


def test_replay_names_each_run_of_an_id_that_has_several(
    cli, on, make_engine, testapp, monkeypatch
) -> None:
    # Two runs of m-1 (the second a new run of the id), both recorded step "a": with the
    # code's first step now "b", both fail to replay, and each line says which run.
    async def two_runs() -> list[str]:
        run_ids = []
        async with make_engine() as engine:
            for n in range(2):
                h = await engine.start("cli_mend", None, id="m-1", on_conflict="new_run")
                await h.signal("go", n)
                await h.result()
                run_ids.append(engine.runs.latest("m-1").run_id)
        return run_ids

    first, second = asyncio.run(two_runs())
    monkeypatch.setattr(testapp, "SHAPE", "b")
    r = cli("replay", "--all", *on)
    assert r.exit_code == 1, r.output
    lines = sorted(r.stdout.splitlines())
    assert lines == sorted(
        f"MISMATCH m-1 run {run_id} (cli_mend, completed): replay mismatch at operation #1: "
        "the journal holds step 'a', the code asks for step 'b'"
        for run_id in (first, second)
    )
    one = cli("replay", "m-1", *on)  # the newest alone: the id is enough
    assert one.stdout.startswith("MISMATCH m-1 (cli_mend, completed)"), one.stdout


def test_describe_of_a_stuck_run_gives_its_next_step_and_resume_carries_it_on(
    cli, on, make_stuck, testapp, bad_input
) -> None:
    make_stuck()  # s-1 recorded step "a"; the code now asks for "b"
    assert cli("result", "s-1", "--wait", *on).exit_code == 1  # now stuck
    described = cli("describe", "s-1", *on)
    assert described.exit_code == 0, described.output
    assert "stuck" in described.stdout
    assert "fix the code, check it with `fusee replay s-1`, then `fusee resume s-1`" in (
        " ".join(described.stdout.split())
    )
    testapp.SHAPE = "a"  # the fix
    resumed = cli("resume", "s-1", *on)
    assert resumed.exit_code == 0, resumed.output  # as the README's exit codes say
    assert "resumed s-1 (stuck" in resumed.stderr
    # A run neither paused nor stuck: exit 2.
    r = cli("start", "cli_echo", "--input", "-", "--id", "e-9", *on, input='"x"')
    assert r.exit_code == 0, r.output
    bad_input(cli("resume", "e-9", *on), 2)
