"""A home is private to the account that runs fusee (issue 16, item 3).

The home and its directories 0700, every file in them 0600 (segments,
checkpoints, `history.db` and its `-wal` and `-shm`, the run log, `LOCK`,
`secret`, `control.sock`), whatever the umask; and a home an older version
made 0755 and 0644 is tightened when it is opened.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Completion, Ctx, workflow

TOKENS: list[str] = []


def _send(completion: Completion) -> None:
    TOKENS.append(completion.token)


@workflow
async def perm_everything(ctx: Ctx, _: Any) -> Any:
    ctx.log.info("a line of the run log, with the run's data in it")
    return await ctx.await_completion("review", _send)


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


def modes(home: Path) -> dict[str, str]:
    """The permission bits of the home and everything in it, by path (the home: ".")."""
    return {
        str(p.relative_to(home)): oct(stat.S_IMODE(p.lstat().st_mode))
        for p in [home, *home.rglob("*")]
    }


def private(home: Path) -> dict[str, str]:
    """What `modes` must be: directories 0700, anything else 0600."""
    return {
        str(p.relative_to(home)): oct(0o700 if p.is_dir() else 0o600)
        for p in [home, *home.rglob("*")]
    }


async def fill(make_engine: Any, home: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Makes every kind of file a home holds; returns (`modes`, `private`) as they were
    while the engine was open."""
    TOKENS.clear()
    async with make_engine() as engine:
        handle = await engine.start("perm_everything", None, id="p-1")
        await engine.wait_until(lambda: bool(TOKENS))
        await engine.complete(TOKENS[0], "yes")
        assert await handle.result() == "yes"
        await engine.checkpoints.flush_history()
        await engine.checkpoint()
        names = {p.name for p in home.rglob("*")}
        every = {"LOCK", "secret", "control.sock", "history.db", "history.db-wal"}
        every |= {"history.db-shm", "journal", "logs", "fusee.log"}
        assert every <= names, every - names
        assert any(n.endswith(".seg") for n in names) and any(n.endswith(".ckpt") for n in names)
        return modes(home), private(home)


async def test_a_home_is_private_whatever_the_umask(make_engine, home, umask) -> None:
    opened, wanted = await fill(make_engine, home)
    assert opened == wanted
    assert modes(home) == private(home)  # closed: the -wal, -shm and socket are gone


async def test_opening_a_home_made_readable_by_an_older_version_tightens_it(
    make_engine, home, caplog
) -> None:
    await fill(make_engine, home)
    for p in [home, *home.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    loose = len(modes(home))
    with caplog.at_level(logging.WARNING, logger="fusee"):
        async with make_engine():
            assert modes(home) == private(home)
    assert modes(home) == private(home)
    [said] = [r.getMessage() for r in caplog.records if "other accounts" in r.getMessage()]
    assert said == (
        f"fusee: other accounts had rights on {loose} file(s) or directories of the home "
        f"{home}: took them away (directories 0700, files 0600)"
    )
    # Opening again finds nothing to change, and says nothing.
    caplog.clear()
    async with make_engine():
        pass
    assert not [r for r in caplog.records if "other accounts" in r.getMessage()]


async def test_what_is_not_fusees_in_a_home_is_left_as_it_is(make_engine, home) -> None:
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    notes = home / "notes.txt"
    notes.write_text("the person's own file")
    notes.chmod(0o644)
    opened, wanted = await fill(make_engine, home)
    # Fusee's own files and directories are private; the directory it was pointed at,
    # which holds something else too, and that file keep their modes.
    assert opened == {**wanted, ".": "0o755", "notes.txt": "0o644"}
    for p in [home, *home.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    async with make_engine():
        pass
    assert modes(home) == {**private(home), ".": "0o755", "notes.txt": "0o644"}
