"""A home another local account could write to cannot be turned against its user (issue 36,
item 1).

The attack: another account makes `.fusee` (0777) in a shared sticky directory
and leaves links in it (`LOCK` to a file of the user's, the secret's temporary
name and `logs/fusee.log` to files of its own); the user runs fusee there; the
user's file is truncated, the completion tokens' secret and the run log land
where the other account reads them, and it forges tokens. Here a real second
account, `nobody` (through `runuser`), plants the links, and the tests run as
root: such a home is refused with one line before anything is written. A home
of the user's that others may write to is refused too, with the `chmod` that
fixes it; in a home of the user's, a symbolic link (or another account's file)
where fusee keeps a file is refused when the home is taken, and each file is
opened so that a link is never written through (`journal/safefiles.py`).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fusee_cli.app import app as cli_app
from fusee_runtime import Completion, Config, Ctx, Engine, Rejected, workflow
from fusee_runtime.completions import home_secret
from fusee_runtime.errors import HomeUnsafe
from fusee_runtime.journal.storage import Storage
from fusee_runtime.store.log_files import FileRunLog
from fusee_runtime.store.sqlite_history import SqliteHistory

REPO = Path(__file__).resolve().parents[2]
NOTES = "the user's own notes\n"
TOKENS: list[str] = []


def _send(completion: Completion) -> None:
    TOKENS.append(completion.token)


@workflow
async def planted_review(ctx: Ctx, _: Any) -> Any:
    ctx.log.info("waiting for the review")
    return await ctx.await_completion("review", _send)


def _nobody() -> int | None:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


NOBODY = _nobody()
second_account = pytest.mark.skipif(
    os.geteuid() != 0 or NOBODY is None or shutil.which("runuser") is None,
    reason="needs root, `runuser` and the account `nobody` to act as a second account",
)
OWN_HOME = (
    "it belongs to nobody (uid 65534), not to root (uid 0), which runs fusee: that account "
    "could have left links in it for fusee to write through; use a directory of your own"
)


def as_nobody(script: str) -> None:
    """Runs `sh -c script` as the account `nobody`."""
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every account may write to, sticky as /tmp is (the test's `tmp_path`
    is root's alone: nobody could not reach into it)."""
    path = Path(tempfile.mkdtemp(prefix="fusee-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's that nobody cannot read, only name."""
    path = tmp_path / "notes.txt"
    path.write_text(NOTES)
    return path


def listing(root: Path) -> dict[str, tuple[int, int, str | int]]:
    """Everything under `root`: (owner, mode, link target or size), by path."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        what: str | int = os.readlink(p) if p.is_symlink() else st.st_size
        out[str(p.relative_to(root))] = (st.st_uid, st.st_mode, what)
    return out


def plant_the_issue(shared: Path, victim: Path) -> Path:
    """The issue's home: made by nobody, 0777, with `LOCK` linked to the user's file and
    the secret's temporary name (this process's pid, as fusee named it) and the run log
    linked to nobody's own files. Returns the home."""
    q = shlex.quote
    home = shared / ".fusee"
    as_nobody(
        f"cd {q(str(shared))} && mkdir -m 777 .fusee .fusee/logs"
        " && : > loot-secret && : > loot-log && chmod 666 loot-secret loot-log"
        f" && ln -s {q(str(victim))} .fusee/LOCK"
        f" && ln -s {q(str(shared / 'loot-secret'))} .fusee/.secret.{os.getpid()}"
        f" && ln -s {q(str(shared / 'loot-log'))} .fusee/logs/fusee.log"
    )
    return home


@second_account
async def test_a_home_another_account_made_is_refused_before_anything_is_written(
    shared: Path, victim: Path, clock: Any
) -> None:
    home = plant_the_issue(shared, victim)
    before = listing(shared)
    TOKENS.clear()
    refused: HomeUnsafe | None = None
    try:
        async with Engine(home, app=None, config=Config(clock=clock)) as engine:
            await engine.start("planted_review", None, id="r-1")
            await engine.wait_until(lambda: bool(TOKENS))
    except HomeUnsafe as e:
        refused = e
    assert victim.read_text() == NOTES, "LOCK was written through"
    assert (shared / "loot-secret").read_bytes() == b"", "the secret went to nobody's file"
    assert (shared / "loot-log").read_bytes() == b"", "the run log went to nobody's file"
    assert listing(shared) == before  # nothing made: no LOCK, secret, journal
    assert TOKENS == []
    assert refused is not None and (refused.path, refused.reason) == (str(home), OWN_HOME)
    assert isinstance(refused, PermissionError)


def fusee_command() -> list[str]:
    beside = Path(sys.executable).with_name("fusee")
    found = str(beside) if beside.exists() else shutil.which("fusee")
    assert found is not None, "the `fusee` console script is not installed: pip install -e ."
    return [found]


@second_account
def test_the_cli_refuses_it_in_one_line_with_exit_2(shared: Path, victim: Path) -> None:
    """The real entry point, as the person in the issue would run it."""
    home = plant_the_issue(shared, victim)
    before = listing(shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    line = ["start", "order", "--input", "workflows/order.json", "--home", str(home)]
    done = subprocess.run(
        [*fusee_command(), *line], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert done.stderr.splitlines() == [f"error: cannot use {home} as the fusee home: {OWN_HOME}"]
    assert (done.returncode, done.stdout) == (2, "")
    assert victim.read_text() == NOTES
    assert listing(shared) == before


@second_account
async def test_a_link_to_a_home_is_followed_only_if_this_account_made_it(
    shared: Path, tmp_path: Path, clock: Any
) -> None:
    own = tmp_path / "elsewhere"
    async with Engine(own, app=None, config=Config(clock=clock)):
        pass
    mine = tmp_path / "mine"
    mine.symlink_to(own)
    async with Engine(mine, app=None, config=Config(clock=clock)):
        pass
    theirs = shared / "theirs"
    as_nobody(f"ln -s {shlex.quote(str(own))} {shlex.quote(str(theirs))}")
    with pytest.raises(HomeUnsafe) as got:
        async with Engine(theirs, app=None, config=Config(clock=clock)):
            pass
    assert got.value.reason == (
        f"it is a symbolic link (to {own}) that nobody (uid 65534) made, not root (uid 0), "
        "which runs fusee; use a directory of your own"
    )


@second_account
async def test_a_home_of_ones_own_in_a_shared_directory_opens(
    shared: Path, victim: Path, clock: Any
) -> None:
    """Where the home is does not matter (a sticky /tmp), only whose it is and its mode."""
    plant_the_issue(shared, victim)  # beside it: nobody's home, with its links
    home = shared / "mine"
    async with Engine(home, app=None, config=Config(clock=clock)):
        pass
    assert (home.stat().st_uid, oct(home.stat().st_mode & 0o777)) == (0, "0o700")
    assert victim.read_text() == NOTES


@second_account
def test_fusee_logs_shows_no_line_another_account_wrote(shared: Path, victim: Path) -> None:
    home = plant_the_issue(shared, victim)
    spoofed = '{"ts":1,"level":"info","id":"o-1","msg":"all is well"}'
    as_nobody(
        f"cd {shlex.quote(str(home / 'logs'))} && rm fusee.log && echo '{spoofed}' > fusee.log"
    )
    r = CliRunner().invoke(cli_app, ["logs", "o-1", "--home", str(home)], prog_name="fusee")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.output.splitlines() == [f"error: {home / 'logs'}: {OWN_HOME}"]


def test_the_cli_names_the_file_it_refuses(
    home: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("FUSEE_HOME", raising=False)
    line = ["start", "order", "--input", "workflows/order.json", "--home", str(home)]
    assert CliRunner().invoke(cli_app, line, prog_name="fusee").exit_code == 0
    (home / "LOCK").unlink()
    (home / "LOCK").symlink_to(victim)
    r = CliRunner().invoke(cli_app, line, prog_name="fusee")
    assert r.exit_code == 2, r.output
    assert r.output.splitlines() == [
        f"error: cannot use {home} as the fusee home: it is a symbolic link (to {victim}) "
        "where fusee keeps a file of its own: fusee makes no link there, another account may "
        f"have left it; with the home closed, look at it and remove it ({home / 'LOCK'})"
    ]
    assert victim.read_text() == NOTES


@pytest.mark.parametrize("where", [".", "journal", "logs"])
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o702], ids=oct)
async def test_a_home_others_may_write_to_is_refused_until_made_private(
    make_engine: Any, home: Path, where: str, mode: int
) -> None:
    """Readable by others is tightened on open (tests/journal/test_permissions.py);
    writable is refused: another account could already have left links in it."""
    async with make_engine():
        pass
    loose = home / where
    loose.mkdir(mode=0o700, exist_ok=True)  # logs/ is made by the first line
    loose.chmod(mode)
    before = listing(home)
    with pytest.raises(HomeUnsafe) as got:
        async with make_engine():
            pass
    assert (got.value.path, got.value.reason) == (
        str(loose),
        f"its mode is {mode:04o}: other accounts may write to it, and could have left links "
        f"in it for fusee to write through; make it private (`chmod 700 {loose}`) and open "
        "it again",
    )
    assert listing(home) == before
    loose.chmod(0o700)
    async with make_engine():
        pass


async def fill(make_engine: Any, home: Path) -> None:
    """Makes every kind of file a home holds (the secret, the run log, a checkpoint, the
    history store) and closes the home."""
    TOKENS.clear()
    async with make_engine() as engine:
        handle = await engine.start("planted_review", None, id="r-1")
        await engine.wait_until(lambda: bool(TOKENS))
        await engine.complete(TOKENS[0], "yes")
        assert await handle.result() == "yes"
        await engine.checkpoints.flush_history()
        await engine.checkpoint()
    names = {str(p.relative_to(home)) for p in home.rglob("*")}
    assert {"LOCK", "secret", "history.db", "logs/fusee.log"} <= names


PLANTED = [
    "LOCK",
    "secret",
    "logs/fusee.log",
    "journal/SEGMENT",
    "journal/CHECKPOINT",
    "journal/0000000099.tmp",
    "history.db",
    "history.db-wal",
    "control.sock",
    ".secret.12345",
]


@pytest.mark.parametrize("name", PLANTED)
async def test_a_link_where_fusee_keeps_a_file_is_refused_and_not_written_through(
    make_engine: Any, home: Path, tmp_path: Path, name: str
) -> None:
    """A home of this account's, 0700, in which a link sits in place of one of fusee's
    files (left while it was writable by others, say): the link points at a copy of the
    file, so that a fusee that followed it would work on and write to the copy."""
    await fill(make_engine, home)
    journal = home / "journal"
    name = name.replace("SEGMENT", min(p.name for p in journal.glob("*.seg")))
    name = name.replace("CHECKPOINT", min(p.name for p in journal.glob("*.ckpt")))
    path = home / name
    target = tmp_path / "target"
    target.write_bytes(path.read_bytes() if path.is_file() else b"not fusee's\n")
    before = target.read_bytes()
    path.unlink(missing_ok=True)
    path.symlink_to(target)
    with pytest.raises(HomeUnsafe) as got:
        async with make_engine() as engine:
            await engine.start("planted_review", None, id="r-2")
            await engine.wait_until(lambda: len(TOKENS) == 2)
    assert (got.value.path, got.value.reason) == (
        str(path),
        f"it is a symbolic link (to {target}) where fusee keeps a file of its own: fusee "
        "makes no link there, another account may have left it; with the home closed, "
        "look at it and remove it",
    )
    assert target.read_bytes() == before
    assert path.is_symlink()


@second_account
@pytest.mark.parametrize("name", ["secret", "logs/fusee.log", "journal/0000000099.seg"])
async def test_a_file_of_another_account_where_fusee_keeps_one_is_refused(
    make_engine: Any, home: Path, name: str
) -> None:
    """Such as a `secret` nobody wrote, whose key it knows."""
    await fill(make_engine, home)
    path = home / name
    path.write_bytes(b"k" * 32)
    os.chown(path, NOBODY, -1)
    before = listing(home)
    with pytest.raises(HomeUnsafe) as got:
        async with make_engine():
            pass
    assert (got.value.path, got.value.reason) == (
        str(path),
        "it belongs to nobody (uid 65534), not to root (uid 0), which runs fusee: that "
        "account may have left it where fusee keeps a file of its own; with the home "
        "closed, look at it and remove it",
    )
    assert listing(home) == before


async def test_a_lock_with_a_second_name_is_not_truncated(
    make_engine: Any, home: Path, victim: Path
) -> None:
    """A hard link to a file of the user's, where the system lets any account make one
    (`fs.protected_hardlinks=0`): O_NOFOLLOW does not see it, its count of names does."""
    home.mkdir(mode=0o700)
    os.link(victim, home / "LOCK")
    with pytest.raises(HomeUnsafe, match="several names"):
        async with make_engine():
            pass
    assert victim.read_text() == NOTES


def test_the_secret_is_made_under_a_name_nobody_can_guess(home: Path, tmp_path: Path) -> None:
    """Each file is opened safely on its own, besides the check when the home is taken."""
    home.mkdir(mode=0o700)
    loot = tmp_path / "loot"
    loot.write_bytes(b"")
    (home / f".secret.{os.getpid()}").symlink_to(loot)
    secret = home_secret(home, Storage())
    assert loot.read_bytes() == b""
    assert (home / "secret").read_bytes() == secret and not (home / "secret").is_symlink()
    (home / "secret").unlink()
    (home / "secret").symlink_to(loot)
    with pytest.raises(Rejected, match="is a symbolic link"):
        home_secret(home, Storage())
    assert loot.read_bytes() == b""


def test_no_file_is_written_through_a_link_once_open(tmp_path: Path, caplog: Any) -> None:
    """The run log, a segment, a checkpoint's temporary file and the history store."""
    loot = tmp_path / "loot"
    loot.write_bytes(b"")
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    (logs / "fusee.log").symlink_to(loot)
    run_log = FileRunLog(logs)
    run_log.write({"id": "r-1", "msg": "a line with the run's data"})
    run_log.close()
    assert "symbolic link" in caplog.text
    storage = Storage()
    for leftover in ("0000000000.tmp", "0000000007.ckpt.tmp"):
        (tmp_path / leftover).symlink_to(loot)
    storage.close(storage.create(tmp_path / "0000000000.seg", 4096, b"header"))
    storage.write_file(tmp_path / "0000000007.ckpt.tmp", b"body")
    assert (tmp_path / "0000000000.seg").read_bytes()[:6] == b"header"
    assert (tmp_path / "0000000007.ckpt.tmp").read_bytes() == b"body"
    segment = tmp_path / "0000000099.seg"
    segment.symlink_to(loot)
    with pytest.raises(HomeUnsafe):
        storage.open(segment)
    (tmp_path / "history.db-wal").symlink_to(loot)
    store = SqliteHistory(tmp_path, lambda ids: None)
    store.open()
    assert store.damage is not None and "symbolic link" in str(store.damage)
    assert loot.read_bytes() == b""


def test_fusee_check_says_it_in_one_line(home: Path, tmp_path: Path, clock: Any) -> None:
    asyncio.run(_opened_and_closed(home, clock))
    target = tmp_path / "target"
    target.write_bytes(b"")
    (home / "history.db").unlink()
    (home / "history.db").symlink_to(target)
    r = CliRunner().invoke(cli_app, ["check", "--home", str(home)], prog_name="fusee")
    assert r.exit_code == 2, r.output
    assert r.output.splitlines() == [
        f"error: cannot inspect {home / 'history.db'}: it is a symbolic link (to {target}) "
        "where fusee keeps a file of its own: fusee makes no link there, another account may "
        "have left it; with the home closed, look at it and remove it"
    ]


async def _opened_and_closed(home: Path, clock: Any) -> None:
    async with Engine(home, app=None, config=Config(clock=clock)):
        pass


@second_account
def test_a_command_asks_no_socket_another_account_left(
    home: Path, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fusee` asks the home's owner on `control.sock` first: a socket of another account
    there (its process listening) would be told every call."""
    asyncio.run(_opened_and_closed(home, clock))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(home / "control.sock"))
    listener.listen()
    os.chown(home / "control.sock", NOBODY, -1)
    reached: list[int] = []

    def accept() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # closed by the test
        reached.append(1)
        conn.close()

    thread = threading.Thread(target=accept)
    thread.start()
    monkeypatch.delenv("FUSEE_HOME", raising=False)
    try:
        r = CliRunner().invoke(cli_app, ["list", "--home", str(home)], prog_name="fusee")
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join()
    assert reached == []
    assert r.exit_code == 2, r.output
    assert "control.sock" in r.output and "belongs to nobody (uid 65534)" in r.output
