"""How a status line names the process that drives the runs: the one that owns the
home, or with a PostgreSQL store the worker that drives the journal."""

from __future__ import annotations

import pytest

from fusee_cli import session


def test_a_local_home_names_the_process_that_owns_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSEE_STORE", raising=False)
    assert session.goes_on("o-1", 41) == "now, in the process that owns the home (pid 41)"
    assert session.owner_named(None) == "this process"


def test_with_a_postgresql_store_the_worker_that_drives_the_journal_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (`--store URL` before the command sets FUSEE_STORE for it.)
    monkeypatch.setenv("FUSEE_STORE", "postgresql://fusee@db/orders")
    assert session.goes_on("o-1", 41) == "now, in the worker that drives the journal (pid 41)"
    assert "home" not in session.owner_named(41)
