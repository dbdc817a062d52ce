"""The checkpoints' part of an inspection: which reads whole, which opening starts from."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from fusee_runtime.inspect.reading import Changed, Damage, HomeUnreadable, ReadOnly
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.model import codec
from fusee_runtime.model.records import CLOSES, OfRun, RunStarted
from fusee_runtime.model.sealing import looking


class Entry(TypedDict):
    """A checkpoint file, as `fusee check --json` lists it (see `inspect_checkpoints`)."""

    file: str
    lsn: int
    bytes: int
    records: int | None
    runs: int | None
    runs_open: int | None
    used: bool
    damage: str | None


class Base(TypedDict):
    """The checkpoint opening starts from: its file, lsn, runs (run id: closed; None:
    this version cannot make sense of them) and where it says the journal continues
    (`at`: `[segment name, offset]` as the engine writes it, or None; read unchecked)."""

    file: str
    lsn: int
    runs: dict[str, bool] | None
    at: Any


def inspect_checkpoints(directory: Path) -> tuple[Base | None, list[Entry]]:
    """(the checkpoint opening starts from, every checkpoint file newest first).

    Each entry has its file, lsn, bytes, the records and runs it holds, `used`
    (opening starts from it) and `damage` (why it cannot be read, or None).
    The one used carries its runs (run id: closed) under `runs`, or None
    when this version cannot make sense of its body (opening then refuses
    the home: it falls back only over a file that does not read whole).

    Raises:
        Changed: a checkpoint vanished while it was read.
    """
    storage = ReadOnly({})
    out: list[Entry] = []
    base: Base | None = None
    for lsn, path in ckpt.listed(directory):
        try:
            raw = storage.read(path)
        except FileNotFoundError:
            raise Changed(str(path)) from None
        except OSError as e:
            raise HomeUnreadable(f"cannot read the checkpoint {path}: {e}") from None
        entry: Entry = {
            "file": str(path),
            "lsn": lsn,
            "bytes": len(raw),
            "records": None,
            "runs": None,
            "runs_open": None,
            "used": False,
            "damage": None,
        }
        out.append(entry)
        try:
            got = ckpt.decode(path, raw)
        except ckpt.CheckpointDamaged as e:
            entry["damage"] = e.reason
            continue
        runs: dict[str, bool] | None = None
        try:
            records, runs = _checkpoint_runs(got.body)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            entry["damage"] = f"it reads whole but this version cannot make sense of it ({e!r})"
        else:
            open_runs = sum(not c for c in runs.values())
            entry.update({"records": records, "runs": len(runs), "runs_open": open_runs})
        if base is None:
            # Opening starts from the newest that reads whole, and refuses the home
            # if that one then makes no sense: it does not fall back past it.
            base = {"file": entry["file"], "lsn": lsn, "runs": runs, "at": got.body.get("at")}
            entry["used"] = True
    return base, out


def _checkpoint_runs(body: dict[str, Any]) -> tuple[int, dict[str, bool]]:
    """(records, {run id: closed}) of a checkpoint's body (read as it is: what does not
    make sense raises, and the caller says so).

    A run made by `continue_as_new` names itself in how it was created; any
    other begins with its `RunStarted`. A record may be in two runs' lists
    (the one that continues a run), so records are counted by lsn.
    """
    lsns: set[int] = set()
    runs: dict[str, bool] = {}
    for creation, arrays in body["runs"]:
        recs = [(lsn, codec.from_array(array, looking())) for lsn, array in arrays]
        first = recs[0][1] if recs else None
        if creation is not None and creation["kind"] == "continued":
            run_id = creation["run_id"]
        elif isinstance(first, RunStarted):
            run_id = first.run_id
        else:
            raise ValueError(f"a run begins at lsn {recs[0][0]} with no RunStarted")
        runs[run_id] = any(
            isinstance(rec, OfRun) and type(rec) in CLOSES and rec.run_id == run_id
            for _, rec in recs
        )
        lsns.update(int(lsn) for lsn, _ in recs)
    if not isinstance(body["schedules"], dict):
        raise TypeError("its schedules are not an object")
    return len(lsns), runs


def checkpoint_damages(checkpoints: list[Entry]) -> list[Damage]:
    """Each damaged checkpoint as damage, saying what opening does about it."""
    used = next((c for c in checkpoints if c["used"]), None)
    out: list[Damage] = []
    for c in checkpoints:
        if c["damage"] is None:
            continue
        if c["used"]:
            then = "opening the home refuses it (it falls back only over a file that is not whole)"
        elif used is not None and c["lsn"] < used["lsn"]:
            then = f"opening does not need it (it starts from {Path(used['file']).name})"
            if not any(o["damage"] is None and o["lsn"] < used["lsn"] for o in checkpoints):
                then += ", but that one has no whole checkpoint left to fall back on"
        elif used is not None:
            then = (
                f"opening passes over it and starts from {Path(used['file']).name} "
                f"(lsn {used['lsn']}) and the journal after that"
            )
        else:
            then = (
                "opening passes over it, and no checkpoint is left: it reads the journal from lsn 1"
            )
        out.append(
            {
                "kind": "checkpoint",
                "file": c["file"],
                "offset": 0,
                "reason": f"{c['damage']}; {then}",
            }
        )
    return out
