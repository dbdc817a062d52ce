"""Payload codecs (issue 39, item 2), on both stores: with `Encrypt`, no file of the
home and no row of the database holds a value of the user's readable; keys rotate
across a reopen; a missing or wrong key is one error naming the key id, and nothing
is written; a home is looked at without the key, its values shown as `encrypted (key
k1)`; `Compress` makes large payloads smaller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import CodecError, Ctx, current_ctx, step, workflow
from fusee_runtime.codecs import Compress, Encrypt
from fusee_runtime.model.sealing import label

STORES = ("local", "postgresql")

MARKER = "zebra-7731-plaintext"
"""In every kind of payload the workload makes: no stored byte may hold it."""

K1, K2 = bytes(range(32)), bytes(range(100, 132))


@step(name="codec.fetch")
async def fetch(x: str) -> dict[str, str]:
    current_ctx().heartbeat({"seen": f"{MARKER}-beat"})
    return {"got": f"{MARKER}-step-{x}"}


@workflow(name="codec.child")
async def child(ctx: Ctx, value: str) -> str:
    return f"{value}-child-result"


@workflow(name="codec.order")
async def order(ctx: Ctx, data: dict[str, Any]) -> dict[str, Any]:
    notes: list[str] = []

    def note(text: str) -> str:
        notes.append(text)
        return f"{text}-update-result"

    ctx.on_update("note", note)
    ctx.on_query("notes", lambda _: list(notes))
    got = await fetch(data["item"])
    ctx.stream("events").append({"event": f"{MARKER}-stream"})
    kid = await ctx.child(child, f"{ctx.workflow_id}-kid", f"{MARKER}-child-input")
    signal = await ctx.wait_for("go")
    return {"got": got, "kid": kid, "signal": signal, "notes": notes}


def encrypt(**more: Any) -> Encrypt:
    return Encrypt(keys={"k1": K1}, current="k1", **more)


async def workload(engine: Any, id: str) -> Any:
    h = await engine.start(order, {"item": f"{MARKER}-input"}, id=id)
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)
    assert await h.update("note", f"{MARKER}-update-arg") == f"{MARKER}-update-arg-update-result"
    await h.signal("go", f"{MARKER}-signal")
    return await h.result(timeout=30)


def stored_bytes(home: Path, pg_dump: Any) -> list[tuple[str, bytes]]:
    """Every file under the home, and every row of the database."""
    found = [(str(p), p.read_bytes()) for p in home.rglob("*") if p.is_file()]
    if pg_dump is not None:
        found.extend(pg_dump())
    return found


@pytest.fixture
def rows(store: str | None) -> Any:
    """A function that reads every row of every table of the store's database, as text."""
    if store is None:
        return None

    def dump() -> list[tuple[str, bytes]]:
        import psycopg

        out = []
        with psycopg.connect(store) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
            for (table,) in tables:
                for row in conn.execute(f'SELECT t::text FROM "{table}" t'):
                    out.append((f"table {table}", row[0].encode()))
        return out

    return dump


async def test_no_stored_byte_holds_a_value_of_the_user_s(
    make_engine: Any, home: Path, rows: Any
) -> None:
    async with make_engine(codec=encrypt()) as engine:
        result = await workload(engine, "o-1")
        assert result["signal"] == f"{MARKER}-signal"
        assert result["kid"] == f"{MARKER}-child-input-child-result"
        # A reset run keeps the ops it inherits as JSON (its creation), and a schedule
        # made at run time its input: both in the checkpoint and the history store.
        await engine.reset("o-1", 2)
        await engine.schedules.set(
            "nightly",
            {"workflow": "codec.child", "cron": "0 3 * * *", "input": f"{MARKER}-sched"},
            create=True,
        )
        await engine.checkpoint()
    async with make_engine(codec=encrypt(), checkpoint_bytes=1) as engine:
        reset = engine.runs.latest("o-1")
        assert reset.creation is not None and reset.creation["kind"] == "reset"
        assert (await engine.handle("o-1").result(timeout=30))["got"]["got"].startswith(MARKER)
        result = await workload(engine, "o-2")  # with a checkpoint after every record
        assert result["notes"] == [f"{MARKER}-update-arg"]
    found = stored_bytes(home, rows)
    assert any("journal" in where for where, _ in found)
    assert [where for where, data in found if MARKER.encode() in data] == []
    # ... and the values are all there for a process that has the key.
    async with make_engine(codec=encrypt(), drive=False) as engine:
        history = await engine.history("o-1")
        assert f"{MARKER}-update-arg" in str(history)
        assert (await engine.handle("o-2").result(timeout=30))["signal"] == f"{MARKER}-signal"


async def test_keys_rotate_across_a_reopen(make_engine: Any) -> None:
    async with make_engine(codec=encrypt()) as engine:
        await engine.start(order, {"item": "a"}, id="r-1")
        await engine.wait_until(lambda: engine.runs.latest("r-1").live.parked)
    rotated = Encrypt(keys={"k1": K1, "k2": K2}, current="k2")
    async with make_engine(codec=rotated) as engine:
        await engine.handle("r-1").signal("go", "after the rotation")
        result = await engine.handle("r-1").result(timeout=30)
        assert result["got"] == {"got": f"{MARKER}-step-a"}  # written under k1
        assert result["signal"] == "after the rotation"  # written under k2
    # Without k1, what it encrypted is named, and nothing is read as something else.
    async with make_engine(codec=Encrypt(keys={"k2": K2}), drive=False) as engine:
        run = engine.runs.latest("r-1")
        assert run.result["signal"] == "after the rotation"  # one payload, under k2
        assert label(run.input) == label(run.ops["1"].value) == "encrypted (key k1)"
        shown = {label(v) for e in await engine.history("r-1") for v in e.values()}
        assert shown == {None, "encrypted (key k1)"}  # the step's result, its input


def journal_state(home: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in (home / "journal").rglob("*") if p.is_file()}


def records_state(home: Path, rows: Any) -> list[tuple[str, bytes]]:
    """The journal, checkpoints and history store: files, or the database's rows."""
    if rows is None:
        return sorted(journal_state(home).items())
    kept = ("table fusee_journal", "table fusee_checkpoints", "table fusee_runs")
    return sorted((where, data) for where, data in rows() if where in kept)


@pytest.mark.parametrize("codec", ["missing", "wrong", "none"])
async def test_a_missing_or_wrong_key_is_one_error_naming_it_and_nothing_is_written(
    make_engine: Any, home: Path, rows: Any, codec: str
) -> None:
    async with make_engine(codec=encrypt()) as engine:
        await engine.start(order, {"item": "a"}, id="w-1")
        await engine.wait_until(lambda: engine.runs.latest("w-1").live.parked)
    before = records_state(home, rows)
    other = {
        "missing": Encrypt(keys={"k2": K2}),
        "wrong": Encrypt(keys={"k1": K2}),
        "none": None,
    }[codec]
    engine = make_engine(codec=other)
    with pytest.raises(CodecError) as raised:
        await engine.open()
    assert "key k1" in str(raised.value) and "\n" not in str(raised.value)
    assert ("wrong" in str(raised.value)) == (codec == "wrong")
    assert records_state(home, rows) == before
    # Opened without driving (a command that looks), it reads; it writes no payload.
    async with make_engine(codec=other, drive=False) as passive:
        assert label(passive.runs.latest("w-1").input) == "encrypted (key k1)"
        if codec != "missing":  # (with k2 it writes under k2: a rotation)
            with pytest.raises(CodecError, match=r"key k1.*nothing was written"):
                await passive.handle("w-1").signal("go", "plain text")
            with pytest.raises(CodecError, match="key k1"):
                await passive.start(order, {"item": "b"}, id="w-2")
            assert records_state(home, rows) == before
    async with make_engine(codec=encrypt()) as engine:
        await engine.handle("w-1").signal("go", "at last")
        assert (await engine.handle("w-1").result(timeout=30))["signal"] == "at last"
        assert "w-2" not in [r.id for r in await engine.list()]


async def test_large_payloads_are_compressed_and_small_ones_kept(
    make_engine: Any, home: Path, store: str | None
) -> None:
    big = "abc" * 20_000
    async with make_engine(codec=Compress(threshold_bytes=1024)) as engine:
        h = await engine.start(child, big, id="c-1")
        assert await h.result(timeout=30) == f"{big}-child-result"
        h = await engine.start(child, "small", id="c-2")
        assert await h.result(timeout=30) == "small-child-result"
    if store is None:
        journal = b"".join(journal_state(home).values())
        assert big.encode() not in journal and b'"small"' in journal
        assert len(journal.replace(b"\x00", b"")) < len(big)  # (segments are preallocated)
    async with make_engine(codec=Compress(threshold_bytes=1024), drive=False) as engine:
        assert await engine.handle("c-1").result(timeout=30) == f"{big}-child-result"
    async with make_engine(drive=False) as engine:  # no codec: what zlib made is named
        assert label(engine.runs.latest("c-1").input) == "encoded (zlib)"


def test_keys_come_from_the_environment_and_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    from fusee_runtime import Config

    b1, b2 = base64.b64encode(K1).decode(), base64.b64encode(K2).decode()
    monkeypatch.setenv("FUSEE_KEYS", f"k1={b1},k2={b2}")
    codec = Config().codec
    assert isinstance(codec, Encrypt) and codec.current == "k2" and codec.key_ids == ["k1", "k2"]
    monkeypatch.delenv("FUSEE_KEYS")
    keys = tmp_path / "keys"
    keys.write_text(f"# rotated in May\nold={b1}\nnew={b2}\n")
    monkeypatch.setenv("FUSEE_KEYS_FILE", str(keys))
    codec = Config().codec
    assert isinstance(codec, Encrypt) and codec.current == "new"
    monkeypatch.delenv("FUSEE_KEYS_FILE")
    assert Config().codec is None
    asked: list[str] = []

    def fetch(key_id: str) -> bytes | None:
        asked.append(key_id)
        return {"svc-1": K1}.get(key_id)

    e = Encrypt(current="svc-1", fetch=fetch)
    label_, data = e.encode(b'"x"') or ("", b"")
    assert e.decode(label_, data) == b'"x"' and asked == ["svc-1"]
    with pytest.raises(CodecError, match="key svc-2"):
        e.decode("aes-gcm:svc-2", data)
    for bad in ("k1=notbase64!", "k1", f"k1={base64.b64encode(b'short').decode()}"):
        monkeypatch.setenv("FUSEE_KEYS", bad)
        with pytest.raises(ValueError) as raised:
            Config()
        assert "\n" not in str(raised.value) and "$FUSEE_KEYS" in str(raised.value)


async def test_a_value_shaped_as_an_envelope_is_refused_not_misread(make_engine: Any) -> None:
    async with make_engine() as engine:
        with pytest.raises(CodecError, match="codec"):
            await engine.start(child, {"\x00codec": ["aes-gcm:k1"], "data": ""}, id="e-1")
        # Not first, it is any key.
        h = await engine.start(child, "x", id="e-2")
        assert await h.result(timeout=30) == "x-child-result"
