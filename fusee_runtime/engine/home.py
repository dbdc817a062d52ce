"""Ownership of a home (one process at a time holds `<home>/LOCK`), and its privacy.

A home holds every workflow's inputs, results and signals, so it is private
to the account that runs fusee, as PostgreSQL keeps its data directory:
the home and its directories 0700, its files 0600, whatever the umask.
What fusee creates is created so (`safefiles.private_dir`, and each writer passes
0600 to `open`); opening a home also tightens what an older version made
0755 and 0644 (`make_private`), rather than refusing it as PostgreSQL does:
taking read rights away from other accounts is always safe, and it is what
the person would be told to do. What is not fusee's is never touched.

A home other accounts could write to is another matter: they could have
left links in it for fusee to write through (`journal/safefiles.py` says
how). Taking a home refuses it (`HomeUnsafe`) unless it is this account's
and no other may write to it (nor to `journal/` and `logs/`), and unless
what sits where fusee keeps its files is fusee's: no symbolic link, nothing
of another account (`refuse_planted`). Making it private then is for the
person to do (`chmod 700`), once they know nothing was left in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from pathlib import Path

from fusee_runtime.completions import SECRET_NAME
from fusee_runtime.control.protocol import SOCKET_NAME
from fusee_runtime.errors import HomeLocked, HomeUnsafe
from fusee_runtime.journal.safefiles import check_dir, check_entry, nofollow, open_file
from fusee_runtime.store.history_db import NAME as HISTORY

log = logging.getLogger("fusee")

LOCK_NAME = "LOCK"
FILE_MODE = 0o600
SUBDIRS = ("journal", "logs")
"""The home's directories: everything in them is fusee's."""
FILES = frozenset(
    {LOCK_NAME, SECRET_NAME, SOCKET_NAME, HISTORY, f"{HISTORY}-wal", f"{HISTORY}-shm"}
)
"""Fusee's files in the home itself."""
TEMP_PREFIXES = (f".{SECRET_NAME}.",)
"""A file fusee writes, then links in place (a crash may leave it)."""


class HomeLock:
    """An exclusive `flock` on `<home>/LOCK`, with the owner's pid written in it.

    The kernel drops a flock when its process dies, so a lock left by a
    crashed process is simply taken over.
    """

    def __init__(self, home: Path) -> None:
        self.path = home / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Takes the home, once sure no other account could have left anything in it
        (`check_dir`, `refuse_planted`), and makes what fusee keeps in it private
        (`make_private`).

        Raises:
            HomeUnsafe: the home is another account's, or others may write to it, or
                something in it is not fusee's (a symbolic link...): nothing was written
                through it (at most an empty `LOCK` made, in a home of this account's).
            HomeLocked: another process holds it.
            OSError: `LOCK` cannot be opened (a directory, say).
        """
        home = self.path.parent
        check_dir(home)
        fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            if os.fstat(fd).st_nlink != 1:
                # A second name: another account may have linked a file of this one's here.
                raise HomeUnsafe(
                    str(self.path),
                    "it has several names (hard links): fusee makes one only, another "
                    "account may have linked a file of yours there; with the home closed, "
                    "look at it and remove it",
                )
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HomeLocked(str(home), self.owner()) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            refuse_planted(home)
        except BaseException:
            os.close(fd)  # drops the flock
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        make_private(home)

    def owner(self) -> int | None:
        """The pid written by the process holding (or last holding) the lock."""
        try:
            with open(self.path, encoding="ascii", opener=nofollow) as f:
                return int(f.read().strip() or 0) or None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def refuse_planted(home: Path) -> None:
    """Raises `HomeUnsafe` for the first thing in the home that fusee would open
    though it is not fusee's: a symbolic link, or something of another account,
    where fusee keeps a file (`FILES`, the temporary names, and everything in
    `journal/` and `logs/`), or a `journal/` or `logs/` that `check_dir` refuses.

    Fusee makes no link in a home, and the home is this account's alone
    (`check_dir`), so such a thing was left by another account while it could
    write there. Checked once, when the home is taken (or inspected).
    """
    for name in sorted(os.listdir(home)):
        path = home / name
        if name in SUBDIRS:
            check_dir(path)
            if not path.is_dir():
                check_entry(path)
                continue
            with contextlib.suppress(FileNotFoundError):  # inspected while an owner works
                for entry in sorted(os.listdir(path)):
                    check_entry(path / entry)
        elif name in FILES or name.startswith(TEMP_PREFIXES):
            check_entry(path)


def check_reachable(home: Path) -> None:
    """What a command checks before asking the home's owner on its socket: the home
    (`check_dir`), and that the socket is this account's (another account's process
    may listen on one it left there, and be told every call).

    Raises:
        HomeUnsafe: either is not.
    """
    check_dir(home)
    check_entry(home / SOCKET_NAME)


def make_private(home: Path) -> int:
    """Takes every right of other accounts away from what fusee keeps in the home (the
    owner's own rights stay as they are); returns how many files and directories it changed.

    That is `journal/` and `logs/` and everything in them, and fusee's files
    in the home itself (`FILES`). Other files there are not fusee's, and not
    touched; the home directory itself is made 0700 only when it holds
    nothing else (a home pointed at a shared directory keeps that
    directory's mode: what fusee keeps in it is private all the same). Only
    what this account owns is changed, symbolic links are not followed
    inside, and what cannot be changed is left as it is.
    """
    uid = os.geteuid()
    try:
        names = os.listdir(home)
    except OSError:
        return 0
    ours = [n for n in names if n in FILES or n in SUBDIRS or n.startswith(TEMP_PREFIXES)]
    changed = 0
    if len(ours) == len(names):
        changed += _tighten(home, uid, follow=True)
    for name in ours:
        path = home / name
        changed += _tighten(path, uid, follow=name in SUBDIRS)
        if name in SUBDIRS:
            with contextlib.suppress(OSError):  # not a directory: opening says so
                for entry in os.scandir(path):
                    changed += _tighten(Path(entry.path), uid, follow=False)
    if changed:
        log.warning(
            "fusee: other accounts had rights on %d file(s) or directories of the home %s: "
            "took them away (directories 0700, files 0600)",
            changed,
            home,
        )
    return changed


def _tighten(path: Path, uid: int, follow: bool) -> int:
    """Takes away the rights of group and others on `path`; 1 if it changed it."""
    try:
        st = os.stat(path, follow_symlinks=follow)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != uid or not st.st_mode & 0o077:
            return 0
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
    except OSError:
        return 0
    return 1
