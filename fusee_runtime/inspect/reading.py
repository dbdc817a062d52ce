"""How inspection reads a home: through a storage that changes nothing, what it raises,
and the damage it reports (`Damage`)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from fusee_runtime.errors import FuseeError
from fusee_runtime.journal.storage import Storage


class Damage(TypedDict):
    """Damage found, as `fusee check --json` gives it: of which part of the home
    (`kind`: journal, checkpoint, history, home), in which file, where in it (None:
    nowhere in particular), and why."""

    kind: str
    file: str
    offset: int | None
    reason: str


class HomeUnreadable(FuseeError):
    """The home cannot be inspected: it has no journal, a file cannot be read, or files
    keep vanishing under the inspection (an owner compacting faster than it reads)."""


class Changed(FuseeError):
    """A file listed a moment ago is gone: an owner compacted or closed meanwhile.

    `inspect_home` catches it and looks again; after its last look it raises
    `HomeUnreadable` instead, so it never reaches a user.
    """


class ReadOnly(Storage):
    """A `Storage` that keeps what it reads in `data` and refuses to change anything."""

    def __init__(self, data: dict[Path, bytes]) -> None:
        self.data = data

    def read(self, path: Path) -> bytes:
        self.data[path] = got = super().read(path)
        return got

    def open(self, path: Path) -> int:
        # A bug, not an operating error: inspection must never write.
        raise RuntimeError(f"inspection tried to open {path} for writing")

    def create(self, path: Path, size_bytes: int, header: bytes) -> int:
        raise RuntimeError(f"inspection tried to create {path}")

    def write_file(self, path: Path, data: bytes) -> None:
        raise RuntimeError(f"inspection tried to write {path}")

    def rename(self, src: Path, dst: Path) -> None:
        raise RuntimeError(f"inspection tried to rename {src}")

    def remove(self, path: Path) -> None:
        raise RuntimeError(f"inspection tried to remove {path}")

    def sync_dir(self, directory: Path) -> None:
        raise RuntimeError(f"inspection tried to sync {directory}")
