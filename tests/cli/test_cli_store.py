"""`fusee --store URL` and `FUSEE_STORE`: every command on a journal in PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

APP = "fusee_cli_testapp"


def test_commands_given_a_store_keep_the_journal_in_the_database(
    cli, home: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    on = ["--home", str(home), "--app", APP]
    r = cli("--store", pg_url, "start", "cli_echo", "--input", "-", "--id", "e-1", *on, input="5")
    assert r.exit_code == 0, r.stderr
    r = cli("signal", "e-2", "go", "1", "--store", pg_url, *on)  # after the command too
    assert r.exit_code == 3 and "no run with id 'e-2'" in r.stderr
    monkeypatch.setenv("FUSEE_STORE", pg_url)
    r = cli("describe", "e-1", "--json", *on)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "completed"
    with psycopg.connect(pg_url) as conn:
        kinds = conn.execute("SELECT count(*) FROM fusee_journal").fetchone()
    assert kinds is not None and kinds[0] >= 3  # the start, the step, the close
    assert not list((home / "journal").glob("*.seg"))  # nothing in the local journal


@pytest.mark.parametrize(
    ("store", "said"),
    [
        (
            "mysql://x:s3cret@db/x",
            "error: --store (or FUSEE_STORE) takes a PostgreSQL URL, postgresql://user@host/db, "
            "not mysql://...",
        ),
        (
            "password=s3cret host=db",
            "error: --store (or FUSEE_STORE) takes a PostgreSQL URL, postgresql://user@host/db\n",
        ),
        (
            "postgresql://fusee:s3cret@/orders?host=/nonexistent&port=1",
            "error: cannot connect to PostgreSQL database orders on /nonexistent:1: ",
        ),
    ],
)
def test_a_store_that_cannot_be_used_is_one_line_and_exit_2(
    cli, home: Path, store: str, said: str
) -> None:
    r = cli("--store", store, "list", "--home", str(home))
    assert r.exit_code == 2
    assert r.stderr.startswith(said)
    assert r.stderr.count("\n") == 1 and "s3cret" not in r.stderr
    assert "Traceback" not in r.stderr


def test_check_with_a_store_says_it_reads_a_home_s_files_only(cli, home: Path) -> None:
    r = cli("--store", "postgresql://u@/db?host=/nonexistent", "check", "--home", str(home))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: fusee check reads a home's own journal files; with --store")
