"""The golden journals (issue 37, item 5): a local home and a PostgreSQL dump written
once, by the code of the commit `expected.json` names, that today's code must read to
the same runs, replay, and write byte for byte.

- Every record kind of `R` is in a golden journal, with its code: a new kind needs a
  new fixture.
- Every record, decoded and encoded again by each codec (`CODECS`), is the same bytes.
- Opened, the home and the dump give each run's status, result and history (as
  `fusee history --json`), the schedule and the limit, as `expected.json` says: from
  their checkpoint and history store, and from their journal alone.
- Each run's journal replays against `golden_app` (`fusee replay`), and the run left
  open goes on to its end with today's code.
- The play played again today writes the same records, byte for byte.

Never regenerate the fixture to make one of these pass (README.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import golden_app
import make_golden
import orjson
import pytest

from fusee_runtime import Engine, FakeClock
from fusee_runtime.control.api import Control
from fusee_runtime.journal import records
from fusee_runtime.journal.records import R
from fusee_runtime.model import codec
from fusee_runtime.replayer import replay_document

GOLDEN = Path(__file__).resolve().parent
EXPECTED: dict[str, Any] = orjson.loads((GOLDEN / "expected.json").read_bytes())
FIXTURES = (GOLDEN, GOLDEN / "made_schedules", GOLDEN / "rates", GOLDEN / "queues")
"""Every golden fixture: this one (a change of the format adds one beside it)."""


def by_records(payload: bytes) -> bytes:
    """A record's payload decoded, then encoded again by the engine's own encoder
    (`records.encode`: `orjson.dumps` of the record's array, as the driver and the step
    workers write it, a user's value embedded as the bytes `orjson.dumps` made of it)."""
    rec = records.decode(payload)
    return records.encode(R(rec[0]), *rec[1:])


def by_model(payload: bytes) -> bytes:
    """The same through the typed records' codec (`model/codec.py`, issue 37)."""
    return codec.encode(codec.decode(payload))


CODECS = {"records": by_records, "model": by_model}
"""Every codec of records: each must give every golden record's bytes back. A codec
that replaces one takes its place here; none is dropped while the engine uses it."""


def golden_payloads() -> list[bytes]:
    return make_golden.payloads(GOLDEN / "home" / "journal")


def same_as_expected(said: dict[str, Any]) -> None:
    """`said` (`make_golden.expected`) is what `expected.json` says, run by run."""
    want = {k: v for k, v in EXPECTED.items() if k not in ("commit", "kinds", "records")}
    # A schedule's listing may gain fields (issue 38 added name, made, input): those
    # the fixture has must say the same.
    said = {
        **said,
        "schedules": [
            _keys_of(e, s) for s, e in zip(said["schedules"], want["schedules"], strict=True)
        ],
    }
    runs = [(r["id"], r["run_id"]) for r in said["runs"]]
    assert runs == [(r["id"], r["run_id"]) for r in want["runs"]]
    for got, expected in zip(said["runs"], want["runs"], strict=True):
        assert got == expected, f"run {got['id']} ({got['run_id']})"
    assert said["histories"].keys() == want["histories"].keys()
    for id, history in want["histories"].items():
        assert said["histories"][id] == history, f"the history of {id}"
    assert said == want


def _keys_of(expected: dict[str, Any], said: dict[str, Any]) -> dict[str, Any]:
    return {key: said.get(key) for key in expected}


@pytest.fixture(params=make_golden.VARIANTS)
def golden_home(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A copy of the golden home: as kept, or its journal's segments alone."""
    home = tmp_path / "home"
    make_golden.copy_home(GOLDEN / "home", home, request.param)
    return home


def test_the_fixtures_hold_every_record_kind_with_its_code() -> None:
    held: dict[str, int] = {}
    for fixture in FIXTURES:
        held.update(orjson.loads((fixture / "expected.json").read_bytes())["kinds"])
    missing = sorted({r.name for r in R} - held.keys())
    assert not missing, f"record kinds in no golden journal: {missing}: add a fixture (README)"
    assert held == {r.name: int(r) for r in R if r.name in held}, "a record kind changed code"
    assert make_golden.kinds_of(golden_payloads()) == EXPECTED["kinds"]


@pytest.mark.parametrize("name", CODECS)
def test_every_local_record_encodes_again_to_its_bytes(name: str) -> None:
    payloads = golden_payloads()
    assert len(payloads) == EXPECTED["records"]
    for lsn, payload in enumerate(payloads, 1):
        assert CODECS[name](payload) == payload, f"record {lsn}"


async def test_the_golden_home_opens_to_the_same_runs(golden_home: Path) -> None:
    same_as_expected(await make_golden.expected(golden_home, EXPECTED["clock"]))


async def test_every_golden_run_replays_against_its_code(golden_home: Path) -> None:
    config = golden_app.config(FakeClock(EXPECTED["clock"]), drive=False)
    async with Engine(golden_home, app=golden_app, config=config) as engine:
        control = Control(engine)
        docs = [await control.journal(id, run_id) for id, run_id in await control.run_ids()]
    assert [d["run_id"] for d in docs] == [r["run_id"] for r in EXPECTED["runs"]]
    for doc in docs:
        replayed = await replay_document(doc)
        assert replayed.ok, replayed.as_json()


async def test_the_open_run_goes_on_with_todays_code(golden_home: Path) -> None:
    config = golden_app.config(FakeClock(EXPECTED["clock"]))
    async with Engine(golden_home, app=golden_app, config=config) as engine:
        h = engine.handle("open-1")
        await engine.wait_until(golden_app.waiting_for(engine, "open-1", "later"))
        await h.signal("later", "now")
        assert await h.result() == [10, "now"]
        history = await Control(engine).history("open-1")
    before = EXPECTED["histories"]["open-1"]
    assert history[: len(before)] == before
    assert [r["type"] for r in history[len(before) :]] == [
        "SignalReceived",
        "WaitCompleted",
        "RunCompleted",
    ]


def test_the_play_writes_the_same_records_today(tmp_path: Path) -> None:
    """The play played again by today's code, in a process of its own (only the golden
    app registered, the seeded randomness from its start)."""
    script = str(GOLDEN / "make_golden.py")
    done = subprocess.run(
        [sys.executable, script, "--out", str(tmp_path), "--again"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    again = make_golden.payloads(tmp_path / "home" / "journal")
    golden = golden_payloads()
    for lsn, (got, want) in enumerate(zip(again, golden, strict=False), 1):
        assert got == want, f"record {lsn}"
    assert len(again) == len(golden)
    said = orjson.loads((tmp_path / "expected.json").read_bytes())
    assert said.pop("commit") is None
    kinds, records = said.pop("kinds"), said.pop("records")
    assert (kinds, records) == (EXPECTED["kinds"], EXPECTED["records"])
    same_as_expected(said)


@pytest.mark.parametrize("variant", make_golden.VARIANTS)
async def test_the_postgresql_dump_opens_to_the_same_runs_and_bytes(
    pg_server: Any, pg_url: str, tmp_path: Path, variant: str
) -> None:
    import postgres_server
    import psycopg

    psql = make_golden.pg_tool(pg_server.bindir, "psql")
    dump = str(GOLDEN / "postgres.sql")
    args = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, pg_url]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if variant == "journal only":
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for table in make_golden.DERIVED_TABLES:
                conn.execute(f"DELETE FROM {table}")
    payloads = postgres_server.journal_payloads(pg_url)
    assert payloads == golden_payloads()  # the same play wrote the same records
    for name, reencoded in CODECS.items():
        for lsn, payload in enumerate(payloads, 1):
            assert reencoded(payload) == payload, f"record {lsn}, by {name}"
    said = await make_golden.expected(tmp_path / "home", EXPECTED["clock"], pg_url)
    same_as_expected(said)
