"""Payload codecs (issue 39, item 2), on both stores: with `Encrypt`, no file of the
home and no row of the database holds a value of the user's readable; keys rotate
across a reopen; a missing or wrong key is one error naming the key id, and nothing
is written; a home is looked at without the key, its values shown as `encrypted (key
k1)`; `Compress` makes large payloads smaller."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import CodecError, Ctx, RunFailed, current_ctx, step, workflow
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


TOKENS: list[str] = []


@step(name="codec.streamer")
async def streamer() -> None:
    current_ctx().stream("progress").append(f"{MARKER}-step-stream")


@workflow(name="codec.extra")
async def extra(ctx: Ctx, data: dict[str, Any]) -> Any:
    """A step's stream, a completion's value, a batch's signal, a continue-as-new's input."""
    if data.get("continued"):
        return data
    await streamer()
    approved = await ctx.await_completion("approve", lambda c: TOKENS.append(c.token))
    batched = await ctx.wait_for("batch")
    return await ctx.continue_as_new({"continued": [approved, batched]})


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
        await engine.start(extra, {}, id="x-1")
        await engine.wait_until(lambda: bool(TOKENS))
        await engine.complete(TOKENS.pop(), f"{MARKER}-completion")
        await engine.wait_until(lambda: engine.runs.latest("x-1").live.parked)
        batch = await engine.batch(
            "signal", workflow="codec.extra", signal="batch", value=f"{MARKER}-batch"
        )
        assert batch is not None
        done = await engine.handle("x-1").result(timeout=30)
        assert done == {"continued": [f"{MARKER}-completion", f"{MARKER}-batch"]}
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
        assert await engine.start(child, "old", id="r-0") is not None
        assert await engine.handle("r-0").result(timeout=30) == "old-child-result"
    rotated = Encrypt(keys={"k1": K1, "k2": K2}, current="k2")
    async with make_engine(codec=rotated) as engine:
        await engine.handle("r-1").signal("go", "after the rotation")
        result = await engine.handle("r-1").result(timeout=30)
        assert result["got"] == {"got": f"{MARKER}-step-a"}  # written under k1
        assert result["signal"] == "after the rotation"  # written under k2
        assert await engine.handle("r-0").result(timeout=30) == "old-child-result"  # k1
    # k1 retired: what an open run held was stored again under k2 when it closed; a run
    # that closed under k1 shows its history, names k1 where a value would be, and
    # hands no value out.
    async with make_engine(codec=Encrypt(keys={"k2": K2})) as engine:
        result = await engine.handle("r-1").result(timeout=30)
        assert result["got"] == {"got": f"{MARKER}-step-a"}
        shown = {label(v) for e in await engine.history("r-0") for v in e.values()}
        assert shown == {None, "encrypted (key k1)"}
        h = await engine.start(child, "new", id="r-2")
        assert await h.result(timeout=30) == "new-child-result"
    async with make_engine(codec=Encrypt(keys={"k2": K2}), drive=False) as engine:
        with pytest.raises(CodecError, match="key k1, which this process does not have"):
            await engine.handle("r-0").result(timeout=30)


def journal_state(home: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in (home / "journal").rglob("*") if p.is_file()}


def records_state(home: Path, rows: Any) -> list[tuple[str, bytes]]:
    """The journal, checkpoints and history store: files, or the database's rows."""
    if rows is None:
        return sorted(journal_state(home).items())
    kept = ("table fusee_journal", "table fusee_checkpoints", "table fusee_runs")
    return sorted((where, data) for where, data in rows() if where in kept)


@pytest.mark.parametrize("codec", ["missing", "wrong", "none"])
@pytest.mark.parametrize("past", ["an open run", "closed runs only"])
async def test_a_missing_or_wrong_key_is_one_error_naming_it_and_nothing_is_written(
    make_engine: Any, home: Path, rows: Any, codec: str, past: str
) -> None:
    async with make_engine(codec=encrypt()) as engine:
        # With closed runs only, what recovery reads holds no payload: the checkpoint
        # says which keys the home used (and holds one payload of each to try them on).
        if past == "an open run":
            await engine.start(order, {"item": "a"}, id="w-1")
            await engine.wait_until(lambda: engine.runs.latest("w-1").live.parked)
        else:
            assert await (await engine.start(child, "a", id="w-1")).result() == "a-child-result"
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
        if past == "an open run":
            assert label(passive.runs.latest("w-1").input) == "encrypted (key k1)"
            with pytest.raises(CodecError, match=r"key k1.*nothing was written"):
                await passive.handle("w-1").signal("go", "plain text")
            with pytest.raises(CodecError, match=r"key k1.*nothing was written"):
                await passive.handle("w-1").terminate("no payload, and refused all the same")
        with pytest.raises(CodecError, match=r"key k1.*nothing was written"):
            await passive.start(order, {"item": "b"}, id="w-2")
        if past == "closed runs only":  # a value is not handed out: the key is named
            with pytest.raises(CodecError) as said:
                await passive.handle("w-1").result(timeout=30)
            assert "key k1" in str(said.value)
            assert ("key is wrong" in str(said.value)) == (codec == "wrong")
        assert records_state(home, rows) == before
    async with make_engine(codec=encrypt()) as engine:
        if past == "an open run":
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


@workflow(name="codec.echo")
async def echo(ctx: Ctx, size: int) -> str:
    return await pad(size)


@step(name="codec.pad")
async def pad(size: int) -> str:
    return base64.b64encode(os.urandom(size))[: size - 2].decode()  # its JSON: `size` bytes


async def test_a_payload_at_the_limit_is_recorded_and_one_over_it_is_one_clear_error(
    make_engine: Any,
) -> None:
    codec = [Compress(threshold_bytes=10), encrypt()]
    async with make_engine(codec=codec, payload_bytes_max=5000) as engine:
        at_limit = await engine.start(echo, 5000, id="p-1")
        assert len(await at_limit.result(timeout=30)) == 4998
        over = await engine.start(echo, 5001, id="p-2")
        with pytest.raises(
            RunFailed, match=r"CodecError: .* is 5001 bytes, over the limit of 5000"
        ):
            await over.result(timeout=30)
    async with make_engine(codec=codec, payload_bytes_max=5000) as engine:  # read back whole
        assert len(await engine.handle("p-1").result(timeout=30)) == 4998


def test_what_people_see_of_a_value_encrypted_with_a_key_they_have_not() -> None:
    from fusee_cli.tables import clip
    from fusee_runtime.control.ui.html import value

    sealed = {"\x00codec": ["zlib", "aes-gcm:k7"], "data": "AAAA"}
    assert clip(sealed, None) == "encrypted (key k7)"
    assert "encrypted (key k7)" in value(sealed) and "AAAA" not in value(sealed)
    assert clip({"a": 1}, None) == '{"a":1}'
    assert label({"a": {"\x00codec": []}}) is None  # only a whole value is an envelope


@step(name="codec.shaped")
async def shaped() -> dict[str, Any]:
    return {"\x00codec": ["aes-gcm:k1"], "data": ""}


@workflow(name="codec.shaped_step")
async def shaped_step(ctx: Ctx, _: Any) -> Any:
    return await shaped()


@workflow(name="codec.shaped_result")
async def shaped_result(ctx: Ctx, _: Any) -> Any:
    return {"\x00codec": [], "data": 1}


async def test_a_result_shaped_as_an_envelope_fails_its_step_or_run_and_is_not_recorded(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        for wf, id in ((shaped_step, "e-3"), (shaped_result, "e-4")):
            h = await engine.start(wf, None, id=id)
            with pytest.raises(RunFailed, match="marks an encoded payload"):
                await h.result(timeout=30)
    async with make_engine() as engine:  # the journal reads back
        assert (await engine.handle("e-4").describe()).status.value == "failed"


def test_keys_set_badly_are_one_line_that_never_shows_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fusee_runtime import Config
    from fusee_runtime.codecs import KeysInvalid

    key = base64.b64encode(K1).decode()  # (ends in "=": a bare key reads as "id=")
    for bad, said in (
        (key, "key 1: a key is written id=<base64>"),
        (f"{key[:-1]}", "key 1: a key is written id=<base64>"),
        (f"k1={key},k1={key}", "key 2: key k1 is given twice"),
        ("", "$FUSEE_KEYS has no key"),
        (" , ", "$FUSEE_KEYS has no key"),
        ("x" * 70 + "=" + key, "not that one (not shown: it may be a key)"),
    ):
        monkeypatch.setenv("FUSEE_KEYS", bad)
        with pytest.raises(KeysInvalid) as raised:
            Config()
        message = str(raised.value)
        assert said in message and "\n" not in message
        assert key[:8] not in message and key[-8:-1] not in message
        assert isinstance(raised.value, CodecError) and isinstance(raised.value, ValueError)
    monkeypatch.setenv("FUSEE_KEYS", f"k1={key}")
    monkeypatch.setenv("FUSEE_KEYS_FILE", str(tmp_path / "keys"))
    with pytest.raises(KeysInvalid, match="both set"):
        Config()
    monkeypatch.delenv("FUSEE_KEYS")
    (tmp_path / "keys").write_bytes(b"\xff\xfe")
    with pytest.raises(KeysInvalid, match="is not text"):
        Config()
