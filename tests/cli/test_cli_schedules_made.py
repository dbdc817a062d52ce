"""`fusee schedules create|update|delete|backfill`: cron schedules made at run time from
the command line (issue 38), recorded in the home with no owner running, and refused
with a one-line error and exit code 2 when the command is wrong."""

from __future__ import annotations

import json

import pytest


def listed(cli, on) -> dict[str, dict]:
    r = cli("schedules", "--json", *on)
    assert r.exit_code == 0, r.output
    return {row["name"]: row for row in json.loads(r.stdout) if row["made"]}


def test_a_schedule_is_made_changed_paused_and_deleted_from_the_command_line(cli, on):
    r = cli(
        "schedules",
        "create",
        "echoes",
        "--cron",
        "*/5 * * * *",
        "--workflow",
        "cli_echo",
        "--input",
        '{"n": 1}',
        *on,
    )
    assert (r.exit_code, r.stderr) == (0, "echoes: created\n"), r.output
    row = listed(cli, on)["echoes"]
    assert (row["workflow"], row["cron"], row["input"], row["paused"]) == (
        "cli_echo",
        "*/5 * * * *",
        {"n": 1},
        False,
    )
    r = cli("schedules", "update", "echoes", "--cron", "0 * * * *", "--overlap", "allow", *on)
    assert (r.exit_code, r.stderr) == (0, "echoes: updated\n"), r.output
    row = listed(cli, on)["echoes"]
    assert (row["cron"], row["overlap"], row["input"]) == ("0 * * * *", "allow", {"n": 1})
    assert cli("schedules", "pause", "echoes", *on).stderr == "echoes: paused\n"
    assert listed(cli, on)["echoes"]["paused"] is True
    assert cli("schedules", "unpause", "echoes", *on).stderr == "echoes: active\n"
    table = cli("schedules", *on).stdout
    assert "echoes" in table and "cli_echo" in table
    r = cli("schedules", "delete", "echoes", *on)
    assert (r.exit_code, r.stderr) == (0, "echoes: deleted; it fires no more\n"), r.output
    assert listed(cli, on) == {}


def test_a_backfill_records_each_instant_once_even_run_twice(cli, on):
    made = ("schedules", "create", "hourly", "--cron", "0 * * * *", "--workflow", "cli_echo")
    assert cli(*made, "--overlap", "allow", *on).exit_code == 0
    window = ("--from", "2026-01-01T00:00", "--to", "2026-01-01T03:00")
    r = cli("schedules", "backfill", "hourly", *window, "--json", *on)
    assert r.exit_code == 0, r.output
    assert [(id, outcome) for id, outcome in json.loads(r.stdout)] == [
        ("hourly@2026-01-01T00:00:00Z", "started"),
        ("hourly@2026-01-01T01:00:00Z", "started"),
        ("hourly@2026-01-01T02:00:00Z", "started"),
    ]
    again = cli("schedules", "backfill", "hourly", *window, *on)
    assert (again.exit_code, again.stderr) == (
        0,
        "hourly: 3 instant(s): 0 started, 3 existed, 0 skipped\n",
    )
    r = cli("list", "--json", *on)
    assert sorted(row["id"] for row in json.loads(r.stdout)) == [
        f"hourly@2026-01-01T0{h}:00:00Z" for h in range(3)
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("create", "x", "--cron", "0 * * * *"), "needs --cron and --workflow"),
        (("update", "x"), "needs a field to change"),
        (("pause", "x", "--cron", "0 * * * *"), "takes no schedule fields"),
        (("backfill", "x", "--from", "2026-01-01T00:00"), "needs --from and --to"),
        (("delete",), "needs the NAME"),
        (("backfill", "x", "--from", "soon", "--to", "later"), "--from is an ISO 8601 instant"),
        (("create", "x", "--cron", "* *", "--workflow", "cli_echo"), "five fields"),
        (("create", "x", "--cron", "0 * * * *", "--workflow", "cli_nowhere"), "cli_nowhere"),
    ],
)
def test_a_wrong_schedules_command_is_a_one_line_error(cli, on, journal, home, args, said):
    before = journal(home)
    r = cli("schedules", *args, *on)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert said in r.stderr
    assert journal(home) == before
