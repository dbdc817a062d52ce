"""`list(where=...)` (issue 19, search attributes): open runs filtered in memory, closed
ones by the history store through its attributes index, both by the same rules (one
kind per condition, ranges on numbers and text, `!=` needs the key); bad conditions
are `Rejected` with what is wrong; pruning takes a run's attributes with it; a store
written before the attributes table gets one, filled. The tests that take `store` run
on the local home and on PostgreSQL (issue 22: closed runs in `fusee_runs`)."""

from __future__ import annotations

import itertools
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, search, workflow
from fusee_runtime.engine.config import Config
from fusee_runtime.store.history import Closed, Row
from fusee_runtime.store.history_db import NAME
from fusee_runtime.store.seam import open_store
from fusee_runtime.store.sqlite_history import SqliteHistory

STORES = ("local", "postgresql")


@workflow(name="search.tagged")
async def tagged(ctx: Ctx, attributes: dict[str, Any]) -> str:
    ctx.set_attributes(attributes)
    if attributes.get("wait"):
        await ctx.wait_for("go")
    return "done"


async def ids(engine: Any, **where: Any) -> set[str]:
    return {info.id for info in await engine.list(where=where, limit=1000)}


async def test_open_and_closed_runs_are_found_by_their_attributes(make_engine: Any) -> None:
    async with make_engine() as engine:
        for n in range(6):
            attributes = {"customer": f"c-{n % 2}", "amount": n * 50, "wait": n >= 4}
            await engine.start("search.tagged", attributes, id=f"o-{n}")
        await engine.wait_until(
            lambda: all(engine.runs.latest(f"o-{n}").live.parked for n in (4, 5))
        )
        await engine.checkpoints.flush_history()
        stored = {r.run_id for r in engine.runs.store.list(None, None, None)}
        assert len(stored) == 4, "the four closed runs are in the history store"
        engine.runs.evict(list(stored))
        assert await ids(engine, customer="c-1") == {"o-1", "o-3", "o-5"}
        assert await ids(engine, amount=(">", 100)) == {"o-3", "o-4", "o-5"}
        assert await ids(engine, amount=[(">=", 100), ("<", 200)]) == {"o-2", "o-3"}
        assert await ids(engine, customer="c-0", amount=("<=", 100)) == {"o-0", "o-2"}
        assert await ids(engine, wait=True) == {"o-4", "o-5"}
        assert await ids(engine, amount=50.0) == {"o-1"}, "1 and 1.0 are the same number"
        assert await ids(engine, amount="50") == set(), "text never equals a number"
        assert await ids(engine, nosuch="x") == set()
        assert [i.id for i in await engine.list(where={"customer": "c-1"}, limit=2)] == [
            "o-5",
            "o-3",
        ]
        got = await engine.list(status="open", where={"customer": "c-1"})
        assert [i.id for i in got] == ["o-5"]


# -- memory and the store agree --------------------------------------------------------

VALUES: list[Any] = [
    -3,
    0,
    1,
    1.0,
    2.5,
    2**62,
    "",
    "1",
    "a",
    "b",
    "2026-12-01T00:00:00+00:00",
    "2026-12-01T00:00:00.500000+00:00",
    True,
    False,
]
"""Values of every kind, some equal across int and float, some text that looks like a
number or an instant."""


def store_with(home: Path, rows: list[dict[str, Any]], url: str | None = None) -> Any:
    """A history store holding a closed run per row of attributes: the home's, or with
    `url` the one beside a PostgreSQL journal (its `close` closes the journal too)."""
    if url is None:
        store: Any = SqliteHistory(home, on_stored=lambda _: None)
    else:
        journal = open_store(home, Config(store=url))
        journal.open()
        store = journal.history(home, on_stored=lambda _: None)
        close = store.close
        store.close = lambda: (close(), journal.close())
    store.open()
    for n, attributes in enumerate(rows):
        row = Row(
            f"r{n}",
            f"w{n}",
            "wf",
            "completed",
            0.0,
            0.0,
            n + 1,
            n + 1,
            None,
            None,
            None,
            attributes,
        )
        store.put(Closed(row, None, []))
    store.flush()
    return store


def test_memory_and_the_history_store_find_the_same_runs(tmp_path: Path, store: Any) -> None:
    rows = [{"v": value} for value in VALUES] + [{}, {"other": 1}]
    store = store_with(tmp_path, rows, store)
    try:
        for op, wanted in itertools.product(search.OPERATORS, VALUES):
            if op in search.RANGES and isinstance(wanted, bool):
                continue
            where = search.conditions({"v": (op, wanted)})
            in_memory = {f"r{n}" for n, row in enumerate(rows) if search.matches(row, where)}
            stored = {r.run_id for r in store.list(None, None, None, where=where)}
            assert stored == in_memory, (op, wanted)
        # A few that must hold, whatever both sides do:
        got = {r.run_id for r in store.list(None, None, None, where=search.conditions({"v": 1}))}
        assert {rows[int(i[1:])]["v"] for i in got} == {1}  # 1 and 1.0, not True or "1"
        later = search.conditions({"v": (">", datetime(2026, 12, 1, tzinfo=UTC))})
        got = {r.run_id for r in store.list(None, None, None, where=later)}
        # An instant compares as its text: the later instant, and text sorting after it.
        assert {rows[int(i[1:])]["v"] for i in got} == {
            "2026-12-01T00:00:00.500000+00:00",
            "a",
            "b",
        }
        differs = search.conditions({"v": ("!=", 0)})
        got = {r.run_id for r in store.list(None, None, None, where=differs)}
        assert len(got) == len(VALUES) - 1, "every run with the key but the one that is 0"
    finally:
        store.close()


# -- 200,000 closed runs -------------------------------------------------------------

RUNS = 200_000


def test_where_on_200000_closed_runs_reads_the_attributes_index(tmp_path: Path) -> None:
    rows = [{"customer": f"c-{n % 1000}", "amount": n % 333} for n in range(RUNS)]
    store = store_with(tmp_path, rows)
    try:
        counted = store.db.execute("SELECT status, count(*) FROM runs GROUP BY status")
        assert dict(counted.fetchall()) == {"completed": RUNS}
        for where in (
            {"customer": "c-7"},
            {"amount": (">", 330)},
            {"customer": "c-7", "amount": (">", 100)},
        ):
            conditions = search.conditions(where)
            plan = store.query_plan(None, None, 100, conditions)
            assert "attributes_by_value (key=? AND value" in plan, plan
            assert "SCAN runs" not in plan and "SCAN attributes" not in plan, plan
            got = store.list(None, None, None, where=conditions)
            want = [f"r{n}" for n in reversed(range(RUNS)) if search.matches(rows[n], conditions)]
            assert [r.run_id for r in got] == want and want
        # With a status too, the runs are still found by their attributes, not by
        # walking the 200,000 of that status for those that have one.
        plan = store.query_plan("completed", None, 100, search.conditions({"customer": "c-7"}))
        assert "attributes_by_value (key=? AND value=?)" in plan, plan
        assert "runs_by_status" not in plan and "SCAN" not in plan, plan
    finally:
        store.close()


# -- the store's life ----------------------------------------------------------------


async def test_pruned_runs_leave_no_attributes_behind(make_engine: Any, clock: Any) -> None:
    async with make_engine() as engine:
        for n in range(3):
            await (await engine.start("search.tagged", {"n": n}, id=f"p-{n}")).result()
        await engine.checkpoints.flush_history()
        clock.advance(86400)
        assert await engine.prune(3600) == 3
        assert engine.runs.store.list(None, None, None, where=search.conditions({"n": 1})) == []
        if engine.config.store is None:
            db = sqlite3.connect(engine.home / NAME)
            assert db.execute("SELECT count(*) FROM attributes").fetchone() == (0,)
            db.close()


def test_a_store_from_before_the_attributes_table_gets_it_filled(tmp_path: Path) -> None:
    store_with(tmp_path, [{"customer": "c-1", "vip": True}, {"customer": "c-2"}]).close()
    db = sqlite3.connect(tmp_path / NAME)
    db.execute("DROP TABLE attributes")
    db.commit()
    db.close()
    store = SqliteHistory(tmp_path, on_stored=lambda _: None)
    store.open()
    try:
        got = store.list(None, None, None, where=search.conditions({"vip": True}))
        assert [r.run_id for r in got] == ["r0"]
        got = store.list(None, None, None, where=search.conditions({"customer": ("!=", "c-1")}))
        assert [r.run_id for r in got] == ["r1"]
    finally:
        store.close()


# -- what is not a condition -------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (["customer", "c-7"], "where is a mapping of search attribute names to values"),
        ({"": 1}, "where: a search attribute's name is a non-empty string, not ''"),
        ({"amount": ("~", 1)}, "where: 'amount' takes a value, an (operator, value) pair"),
        ({"amount": []}, "where: 'amount' has an empty list of conditions"),
        ({"vip": (">", True)}, "where: 'vip' > true: true and false take = and != only"),
        ({"amount": None}, "where: 'amount' is compared with a str, int, float, bool"),
        ({"amount": float("nan")}, "where: 'amount' = nan: a number must be finite"),
        ({"at": datetime(2026, 1, 1)}, "where: 'at': the datetime must be timezone-aware"),
        ({f"k{n}": n for n in range(21)}, "where holds at most 20 conditions, not 21"),
    ],
)
async def test_what_is_not_a_condition_is_rejected(
    make_engine: Any, where: Any, message: str
) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected) as e:
            await engine.list(where=where)
        assert str(e.value).startswith(message), str(e.value)


def test_the_command_line_form_reads_each_kind_of_value() -> None:
    paris = timezone(timedelta(hours=1))
    got = search.parse(
        [
            "customer=c-7",
            "amount > 100",
            "amount<=500.5",
            "vip=true",
            'zip="01234"',
            "at>=2026-12-01T01:00:00+01:00",
            "note!=",
            "day=2026-12-01",
        ]
    )
    assert got == {
        "customer": [("=", "c-7")],
        "amount": [(">", 100), ("<=", 500.5)],
        "vip": [("=", True)],
        "zip": [("=", "01234")],
        "at": [(">=", datetime(2026, 12, 1, 1, tzinfo=paris).astimezone(UTC).isoformat())],
        "note": [("!=", "")],
        "day": [("=", "2026-12-01")],
    }
    assert search.conditions(got)[1] == ("amount", ">", 100)
    for bad, message in (
        ("customer", "a where condition is KEY=VALUE, or KEY then one of = != < <= > >="),
        ("=c-7", "a where condition is KEY=VALUE"),
        ("vip<true", "where: 'vip' < true: true and false take = and != only"),
        ('zip="\\q"', "where: 'zip': \"\\q\" is not a JSON string"),
        ("n>1e999", "where: 'n' > inf: a number must be finite"),
    ):
        with pytest.raises(Rejected) as e:
            search.parse([bad])
        assert str(e.value).startswith(message), (bad, str(e.value))
