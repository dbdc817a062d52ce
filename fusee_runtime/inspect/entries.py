"""The home's own files beside the journal and the store: `LOCK`, `secret`, `control.sock`.

Each must be what fusee makes there, or absent (each is made when first
needed): `LOCK` a file (any content: a garbage pid is taken over), `secret`
a file of `SECRET_BYTES` bytes, `control.sock` a socket (a stale one, or a
file, is replaced by the next owner). Anything else is damage that opening
or using the home would meet; this says what it breaks. Only their type and
size are read, never the secret itself.
"""

from __future__ import annotations

import stat
from pathlib import Path

from fusee_runtime.completions import SECRET_BYTES, SECRET_NAME
from fusee_runtime.control.protocol import SOCKET_NAME
from fusee_runtime.engine.home import LOCK_NAME
from fusee_runtime.inspect.reading import Damage, HomeUnreadable

BREAKS = {
    LOCK_NAME: "no process can take the home (opening it fails) until it is removed",
    SECRET_NAME: (
        "completion tokens cannot be issued or checked until it is moved aside (tokens "
        "issued with it then no longer work)"
    ),
    SOCKET_NAME: (
        "the owner cannot serve the control API, so other commands cannot reach it, "
        "until it is removed"
    ),
}
"""What each file, damaged, breaks."""


def entry_damages(home: Path) -> list[Damage]:
    """Damage of `LOCK`, `secret` and `control.sock` (none when each is absent or sound).

    Raises:
        HomeUnreadable: one of them cannot be looked at.
    """
    out: list[Damage] = []
    for name, breaks in BREAKS.items():
        path = home / name
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise HomeUnreadable(f"cannot look at {path}: {e.strerror or e}") from None
        what = _wrong(name, st.st_mode, st.st_size)
        if what is not None:
            reason = f"{what}: {breaks}"
            out.append({"kind": "home", "file": str(path), "offset": None, "reason": reason})
    return out


def _wrong(name: str, mode: int, size: int) -> str | None:
    """What is wrong with the home's file `name` of this mode and size, or None."""
    if name == SOCKET_NAME:
        # A socket, or a file the next owner replaces; a directory it cannot remove.
        return "it is a directory" if stat.S_ISDIR(mode) else None
    if stat.S_ISDIR(mode):
        return "it is a directory"
    if not stat.S_ISREG(mode):
        return "it is not a regular file"
    if name == SECRET_NAME and size != SECRET_BYTES:
        return f"it holds {size} bytes, not {SECRET_BYTES}"
    return None
