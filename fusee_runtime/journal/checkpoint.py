"""Checkpoint files: the state of the open work at one lsn, so opening a home
replays only the journal after it. No engine logic here.

A checkpoint is ``<home>/journal/<lsn>.ckpt`` (the lsn zero-padded to 20
digits): every record of the journal up to and including that lsn that the
engine still needs (the open runs', the closed runs' not yet in the history
store), the schedules' state and the limits' sizes, and where in the journal the record after
that lsn goes (``"at": [segment name, byte offset]``, when the engine knows
it: PostgreSQL's redo point), so opening reads the journal from there rather
than from the start of that segment; written whole or not at all::

    file   := header body
    header := magic:8 = b"FUSEECK1"  lsn:u64  length:u64  crc:u32  reserved:u32 = 0
    body   := `length` bytes of JSON (orjson)

``crc`` is CRC-32 of the header's first 24 bytes followed by the body. A
checkpoint is written to ``<name>.tmp``, fsynced, renamed into place and
its directory fsynced, like SQLite's and RocksDB's manifests: a crash at
any point leaves the previous checkpoint as the newest whole one, and a
``.tmp`` that opening removes. A file whose header, length or crc does not
hold is damaged; the engine then falls back to the one before, which the
journal still backs (see `compactable`).
"""

from __future__ import annotations

import itertools
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime.errors import FuseeError
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.json import JsonObject

MAGIC = b"FUSEECK1"
HEADER = struct.Struct("<8sQQII")
HEADER_BYTES = HEADER.size  # 32
SUFFIX = ".ckpt"
KEEP = 2
"""Checkpoints kept: the newest, and the one to fall back to if it is damaged."""


class CheckpointDamaged(FuseeError):
    """A checkpoint file that cannot be read whole.

    Opening passes over such a file to the one before (`newest` says why it
    did), and `fusee check` reports it as damage; `read` and `decode` raise it.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint read back: the lsn it covers and its body."""

    path: Path
    lsn: int
    body: dict[str, Any]


def checkpoint_path(directory: Path, lsn: int) -> Path:
    return directory / f"{lsn:020d}{SUFFIX}"


def listed(directory: Path) -> list[tuple[int, Path]]:
    """(lsn, path) of each checkpoint file in `directory`, newest first."""
    out = []
    for p in directory.glob(f"*{SUFFIX}"):
        if p.stem.isdigit():
            out.append((int(p.stem), p))
    return sorted(out, reverse=True)


def encode(lsn: int, body: JsonObject) -> bytes:
    data = orjson.dumps(body)
    head = HEADER.pack(MAGIC, lsn, len(data), 0, 0)[:24]
    crc = zlib.crc32(data, zlib.crc32(head))
    return HEADER.pack(MAGIC, lsn, len(data), crc, 0) + data


def decode(path: Path, data: bytes) -> Checkpoint:
    """The checkpoint in `data` (read from `path`).

    Raises:
        CheckpointDamaged: the header, length or crc does not hold.
    """
    if len(data) < HEADER_BYTES:
        raise CheckpointDamaged(path, f"{len(data)} bytes, shorter than a header")
    magic, lsn, length, crc, reserved = HEADER.unpack_from(data, 0)
    if magic != MAGIC or reserved != 0:
        raise CheckpointDamaged(path, "not a checkpoint header")
    if HEADER_BYTES + length != len(data):
        raise CheckpointDamaged(
            path, f"header says {length} bytes of body, the file has {len(data) - HEADER_BYTES}"
        )
    body = data[HEADER_BYTES:]
    if zlib.crc32(body, zlib.crc32(data[:24])) != crc:
        raise CheckpointDamaged(path, "CRC mismatch")
    if path.stem.isdigit() and int(path.stem) != lsn:
        raise CheckpointDamaged(path, f"its name says lsn {int(path.stem)}, its header {lsn}")
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise CheckpointDamaged(path, f"body is not JSON ({e})") from None
    if not isinstance(decoded, dict):
        raise CheckpointDamaged(path, "body is not a JSON object")
    return Checkpoint(path, int(lsn), decoded)


def read(path: Path, storage: Storage) -> Checkpoint:
    """Raises `CheckpointDamaged` (or OSError when the file cannot be read)."""
    return decode(path, storage.read(path))


def newest(directory: Path, storage: Storage) -> tuple[Checkpoint | None, list[CheckpointDamaged]]:
    """The newest checkpoint that reads whole (the one opening starts from), and why
    each newer one was passed over."""
    passed: list[CheckpointDamaged] = []
    for _, path in listed(directory):
        try:
            return read(path, storage), passed
        except CheckpointDamaged as e:
            passed.append(e)
    return None, passed


def write(directory: Path, storage: Storage, lsn: int, body: JsonObject) -> Path:
    """Writes the checkpoint of `lsn` atomically and durably; returns its path and size."""
    path = checkpoint_path(directory, lsn)
    tmp = path.with_name(path.name + ".tmp")
    try:
        storage.write_file(tmp, encode(lsn, body))
    except BaseException:
        storage.remove(tmp)  # a full disk keeps no half checkpoint
        raise
    storage.rename(tmp, path)
    storage.sync_dir(directory)
    return path


def remove_leftovers(directory: Path, storage: Storage) -> list[Path]:
    """Removes the `.tmp` of a checkpoint a crash interrupted; returns what it removed."""
    gone = sorted(directory.glob(f"*{SUFFIX}.tmp"))
    for p in gone:
        storage.remove(p)
    if gone:
        storage.sync_dir(directory)
    return gone


def replay_floor(checkpoints: list[tuple[int, Path]]) -> int:
    """The lsn after which opening may replay the journal: that of the older of the
    `KEEP` newest checkpoints (`checkpoints` newest first), the one a damaged newest
    falls back on; 0 (the whole journal) while there are fewer."""
    kept = checkpoints[:KEEP]
    return kept[-1][0] if len(kept) == KEEP else 0


def compactable(
    segments: list[tuple[Path, int]], checkpoints: list[tuple[int, Path]]
) -> tuple[list[Path], list[Path]]:
    """What compaction may delete: (segments, checkpoints).

    `segments` are (path, first lsn) in order; `checkpoints` (lsn, path),
    newest first. The newest `KEEP` checkpoints stay, and every segment
    holding a record after the oldest of them: if the newest is damaged,
    the one before it plus those segments still give every record. The
    last segment (the one appended to) always stays.
    """
    floor = replay_floor(checkpoints)
    if not floor:
        return [], []
    doomed = []
    for (path, _), (_, next_first) in itertools.pairwise(segments):
        if next_first - 1 <= floor:
            doomed.append(path)
    return doomed, [p for _, p in checkpoints[KEEP:]]
