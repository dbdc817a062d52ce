"""Opening a home's files so that another account cannot turn them against its user.

Another local account that could once write to a home (it made the home in a
shared directory, say, or the home was left writable) can leave things where
fusee keeps its files: a symbolic link as `LOCK` gets a file of the user's
truncated when the home is taken; a link at the secret's temporary name gets
the completion tokens' secret written where that account reads it; a link as
`logs/fusee.log` gets the run log, run ids included, appended to its file; a
`secret` of its own holds a key it knows. So, as ssh treats `~/.ssh` and
PostgreSQL its data directory:

- a home (and each of its directories) is used only if it is a directory of
  this account that no other account may write to (`check_dir`); a symbolic
  link to it is followed only if this account made it;
- taking a home refuses a symbolic link, or a file of another account, where
  fusee keeps a file (`engine/home.py`'s `refuse_planted`, with `check_entry`);
- every file is opened with `O_NOFOLLOW` and must be this account's
  (`open_file`); a new one is made with `O_EXCL` (`create_new`), under a name
  no other account can guess when it is linked or renamed into place later
  (`temp_name`).

Each check is made when a file is opened, never on an append: the journal's
hot path is untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
from pathlib import Path

from fusee_runtime.errors import HomeUnsafe

FILE_MODE = 0o600
DIR_MODE = 0o700
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
OTHERS_WRITE = 0o022
"""Write rights of the group and of others: with either, another account can leave a link."""
LEFT_THERE = "with the home closed, look at it and remove it"


def open_file(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """`os.open` of one of fusee's files, never through a symbolic link.

    Raises:
        HomeUnsafe: a symbolic link is at `path`, or a file of another account.
        OSError: as `os.open` (no such file, a directory...).
    """
    try:
        fd = os.open(path, flags | NOFOLLOW, mode)
    except OSError as e:
        # O_NOFOLLOW says ELOOP for a link; O_EXCL says EEXIST before looking at it.
        if e.errno in (errno.ELOOP, errno.EEXIST) and os.path.islink(path):
            raise planted_link(path) from None
        raise
    try:
        uid = os.fstat(fd).st_uid
        if uid != os.geteuid():
            raise foreign_file(path, uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_new(path: Path, flags: int = os.O_WRONLY, mode: int = FILE_MODE) -> int:
    """Makes file `path`, which must not be there yet (`O_EXCL`).

    Raises:
        HomeUnsafe: a symbolic link is at `path`.
        FileExistsError: a file is.
    """
    return open_file(path, flags | os.O_CREAT | os.O_EXCL, mode)


def create_afresh(path: Path, flags: int = os.O_WRONLY, mode: int = FILE_MODE) -> int:
    """Makes file `path` anew: what is there (a crash's leftover) is unlinked first,
    never followed nor truncated (a link, or a second name of another file)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return create_new(path, flags, mode)


def nofollow(path: str, flags: int) -> int:
    """An `opener` for `open()`: as `open_file`."""
    return open_file(Path(path), flags)


def temp_name(path: Path) -> Path:
    """A name beside `path`, which no other account can guess, to write it under
    before linking or renaming it in place."""
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}")


def check_dir(path: Path) -> None:
    """Checks directory `path` (a home, or a directory in it) before fusee uses it.

    Nothing there, or something else than a directory, is left to what opens
    it to say.

    Raises:
        HomeUnsafe: it belongs to another account, or other accounts may write
            to it, or it is a symbolic link another account made.
    """
    uid = os.geteuid()
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != uid:
                raise HomeUnsafe(
                    str(path),
                    f"it is a symbolic link (to {_target(path)}) that {account(st.st_uid)} "
                    f"made, not {account(uid)}, which runs fusee; use a directory of your own",
                )
            st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISDIR(st.st_mode):
        return
    if st.st_uid != uid:
        raise HomeUnsafe(
            str(path),
            f"it belongs to {account(st.st_uid)}, not to {account(uid)}, which runs fusee: "
            "that account could have left links in it for fusee to write through; "
            "use a directory of your own",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & OTHERS_WRITE:
        raise HomeUnsafe(
            str(path),
            f"its mode is {mode:04o}: other accounts may write to it, and could have left "
            f"links in it for fusee to write through; make it private (`chmod 700 {path}`) "
            "and open it again",
        )


def private_dir(path: Path, parents: bool = False) -> None:
    """Makes directory `path` 0700 (whatever the umask) if it is not there.

    Raises:
        HomeUnsafe: it is there, but `check_dir` refuses it (another account's...).
        OSError: it cannot be made, or something else than a directory is there.
    """
    try:
        path.mkdir(mode=DIR_MODE, parents=parents)
    except FileExistsError:
        if not path.is_dir():
            raise
        check_dir(path)
        return
    os.chmod(path, DIR_MODE)  # the umask may have taken bits away, never added any


def check_entry(path: Path) -> os.stat_result | None:
    """What is at `path`, where fusee keeps a file or a directory (None: nothing).

    Raises:
        HomeUnsafe: a symbolic link, or something of another account.
    """
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        raise planted_link(path)
    if st.st_uid != os.geteuid():
        raise foreign_file(path, st.st_uid)
    return st


def planted_link(path: Path) -> HomeUnsafe:
    return HomeUnsafe(
        str(path),
        f"it is a symbolic link (to {_target(path)}) where fusee keeps a file of its own: "
        f"fusee makes no link there, another account may have left it; {LEFT_THERE}",
    )


def foreign_file(path: Path, uid: int) -> HomeUnsafe:
    return HomeUnsafe(
        str(path),
        f"it belongs to {account(uid)}, not to {account(os.geteuid())}, which runs fusee: "
        f"that account may have left it where fusee keeps a file of its own; {LEFT_THERE}",
    )


def account(uid: int) -> str:
    """`nobody (uid 65534)`, for messages."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
