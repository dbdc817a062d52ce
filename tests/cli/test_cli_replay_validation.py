"""`fusee replay --history FILE` trusts nothing in the file (issue 36, item 7).

Real runs are exported (`fusee history ID --export`, and the Python API for
runs that cover every kind of record: retries, a failed step, values,
attributes, a stream, a race, a group, a patch, a child, a signal to itself, an
update, a reset, a continue-as-new, a failure, a cancel), then mutated in every
systematic way: each field replaced by a list, an object, null, a huge integer
or a string; each record dropped, duplicated, moved; run ids, statuses and the
creation changed. Each mutation replays cleanly or not (exit 0 or 1), or is
refused with one line (exit 2, `error: bad history file FILE: ...`): never a
traceback, and never exit 0 for a document no engine writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner, Result

from fusee_cli.app import app
from fusee_runtime import Config, Ctx, Engine, RetryPolicy, Status, StepFailed, step, workflow

APP = ["--app", "fusee_replay_testapp"]
HUGE = 2**63
"""An integer orjson reads (it fits 64 bits unsigned) but no field may hold."""
REPLACEMENTS: list[Any] = [["x"], {"x": 1}, None, HUGE, "x"]
USER_VALUES = {"input", "value", "result", "item", "details", "arg"}
"""Fields that hold a value of the user's: any JSON fits."""
OBJECTS = USER_VALUES | {"origin", "attributes", "failure", "error"}
"""Fields an object fits."""
ONCE = {
    "RunStarted",
    "SignalReceived",
    "CancelRequested",
    "TimerStarted",
    "WaitStarted",
    "ChildStarted",
    "StepCompleted",
    "StepFailed",
    "ValueRecorded",
    "TimerFired",
    "WaitCompleted",
    "CompletionDone",
    "ChildClosed",
    "OpCancelled",
    "StreamAppended",
    "StreamClosed",
    "PatchMarked",
    "AttributesSet",
    "SignalSent",
    "CancelSent",
    "RaceWon",
    "UpdateApplied",
    "UpdateAccepted",
}
"""Records the engine writes once (of an operation, a signal, an update, a run)."""
CLOSES = {
    "RunCompleted",
    "RunFailed",
    "RunTerminated",
    "RunCancelled",
    "RunTimedOut",
    "RunReset",
    "RunContinuedAsNew",
}
Docs = dict[str, dict[str, Any]]


# -- workflows that record every kind of record -------------------------------------

FLAKY = {"failures": 0}


@step(name="replaycheck.work")
async def work(n: int) -> int:
    return n


@step(name="replaycheck.flaky", retry=RetryPolicy(attempts=3, initial=0.001, jitter=False))
async def flaky() -> str:
    if FLAKY["failures"] > 0:
        FLAKY["failures"] -= 1
        raise RuntimeError("down")
    return "up"


@step(name="replaycheck.broken", retry=RetryPolicy(attempts=1))
async def broken() -> None:
    raise ValueError("no stock")


@workflow(name="replaycheck.kid")
async def kid(ctx: Ctx, n: int) -> int:
    return n * 2


@workflow(name="replaycheck.rich")
async def rich(ctx: Ctx, n: int) -> int:
    bumped = [0]

    def bump(by: int) -> int:
        bumped[0] += by
        return bumped[0]

    ctx.on_update("bump", bump)
    await flaky()
    with contextlib.suppress(StepFailed):  # (a step failed for good, recorded)
        await broken()
    ctx.now()
    ctx.uuid()
    ctx.set_attributes({"tier": "gold"})
    out = ctx.stream("out")
    out.append({"i": 1})
    out.close()
    await ctx.race([ctx.sleep("nap", 0), ctx.wait_for("never")])
    await ctx.all([work(2), ctx.sleep("nap2", 0)])
    ctx.patched("fee")
    doubled = await ctx.child(kid, f"{ctx.workflow_id}-kid", n)
    await ctx.signal_workflow(ctx.workflow_id, "go", 7)
    got = await ctx.wait_for("go")
    await ctx.wait_for("finish")
    if n < 1:
        await ctx.continue_as_new(n + 1)
    return doubled + got + bumped[0]


@workflow(name="replaycheck.fails")
async def fails(ctx: Ctx, _: None) -> None:
    await work(1)
    await broken()


@workflow(name="replaycheck.waits")
async def waits(ctx: Ctx, _: None) -> None:
    await work(1)
    await ctx.wait_for("never")


async def _rich_runs(home: Path) -> Docs:
    from fusee_runtime.replayer import history_document

    FLAKY["failures"] = 1
    docs: Docs = {}
    async with Engine(home, app=None, config=Config()) as engine:
        runs = engine.runs

        def at_finish(input: int) -> bool:
            """Run r (of `input`) is parked in its wait for "finish"."""
            run = runs.latest("r")
            waits = [op for op in run.ops.values() if op.kind == "wait" and op.name == "finish"]
            return run.input == input and run.live.parked and bool(waits)

        await engine.start("replaycheck.rich", 0, id="r")
        await engine.wait_until(lambda: at_finish(0))
        assert await engine.update("r", "bump", 3) == 3
        await engine.signal("r", "finish")
        await engine.wait_until(lambda: at_finish(1))
        first = next(r for r in runs.by_run_id.values() if r.workflow_id == "r" and r.input == 0)
        docs["continued_as_new"] = history_document(first)
        docs["open"] = history_document(runs.latest("r"))  # made by continue_as_new
        await engine.signal("r", "finish")
        assert await engine.handle("r").result() == 9
        docs["continued"] = history_document(runs.latest("r"))
        # (Its wait for "finish" takes the signal again: the signals not taken by a
        # wait it kept come again.)
        assert await (await engine.reset("r", 4)).result() == 9
        docs["reset"] = history_document(runs.latest("r"))
        await engine.start("replaycheck.fails", None, id="f")
        await engine.wait_until(lambda: runs.latest("f").status == Status.FAILED)
        docs["failed"] = history_document(runs.latest("f"))
        await engine.start("replaycheck.waits", None, id="c")
        await engine.wait_until(lambda: runs.latest("c").live.parked)
        await engine.cancel("c")
        await engine.wait_until(lambda: runs.latest("c").status == Status.CANCELLED)
        docs["cancelled"] = history_document(runs.latest("c"))
    return docs


# -- the exported documents ---------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), prog_name="fusee")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docs]:
    """History documents of real runs: `payment` of the replay test app, exported by
    `fusee history --export` (completed after a review step; parked in a wait;
    completed after a signal), and the runs of `_rich_runs`."""
    tmp = tmp_path_factory.mktemp("exported")
    home = tmp / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(Path(__file__).parent))
        mp.setenv("REPLAY_LEDGER", str(tmp / "ledger"))
        mp.setenv("REPLAY_DEPLOY", "v1")

        async def build() -> None:
            async with Engine(home, app="fusee_replay_testapp", config=Config()) as engine:
                for n in (14, 3, 6):
                    await engine.start("payment", n, id=f"p-{n}")
                await engine.handle("p-14").result()
                await engine.wait_until(lambda: engine.runs.latest("p-3").live.parked)
                await engine.wait_until(lambda: engine.runs.latest("p-6").live.parked)
                await engine.signal("p-6", "settle")
                await engine.handle("p-6").result()

        asyncio.run(build())
        docs: Docs = {}
        for id in ("p-14", "p-3", "p-6"):
            path = tmp / f"{id}.json"
            wrote = invoke("history", id, "--export", str(path), "--home", str(home), *APP)
            assert wrote.exit_code == 0, wrote.output
            docs[id] = json.loads(path.read_text())
        assert (docs["p-14"]["status"], docs["p-3"]["status"]) == ("completed", "parked")
        docs.update(asyncio.run(_rich_runs(tmp / "rich")))
        yield docs


def replay_file(path: Path) -> Result:
    return invoke("replay", "--history", str(path), *APP)


def write(tmp_path: Path, doc: Any, name: str = "h.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def refused(result: Result, path: Path, *fragments: str) -> str:
    """Exit 2 with one line, `error: bad history file PATH: ...`, and no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: bad history file {path}: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_the_exported_documents_replay_cleanly(exported: Docs, tmp_path: Path) -> None:
    for name, doc in exported.items():
        got = replay_file(write(tmp_path, doc))
        assert got.exit_code == 0, (name, got.output)
        assert got.stdout.startswith(f"ok       {doc['id']} "), got.stdout


# -- the cases issue 36 names -------------------------------------------------------


@pytest.mark.parametrize(("value", "what"), [(["payment"], "a list"), ({"a": 1}, "an object")])
def test_a_workflow_name_that_is_a_list_or_an_object_is_refused(
    exported: Docs, tmp_path: Path, value: Any, what: str
) -> None:
    doc = copy.deepcopy(exported["p-14"])
    doc["records"][0][1][3] = value  # RunStarted's workflow
    path = write(tmp_path, doc)
    lsn = doc["records"][0][0]
    refused(
        replay_file(path),
        path,
        f"record 1 (lsn {lsn}, RunStarted): its workflow is {what}, not a string",
    )


def test_two_step_completions_of_one_operation_are_refused(exported: Docs, tmp_path: Path) -> None:
    doc = copy.deepcopy(exported["p-14"])
    records = doc["records"]
    again = copy.deepcopy(records[1])  # StepCompleted of operation #1
    again[0] = records[1][0] + 1  # (between it and the next, in lsn order)
    assert records[2][0] > again[0]
    records.insert(2, again)
    path = write(tmp_path, doc)
    refused(
        replay_file(path),
        path,
        f"record 3 (lsn {again[0]}, StepCompleted): operation #1 ended at record 2 already",
    )


def test_two_run_completions_are_refused(exported: Docs, tmp_path: Path) -> None:
    doc = copy.deepcopy(exported["p-14"])
    records = doc["records"]
    records.append([records[-1][0] + 1, copy.deepcopy(records[-1][1])])
    path = write(tmp_path, doc)
    n = len(records)
    refused(
        replay_file(path),
        path,
        f"record {n} (lsn {records[-1][0]}, RunCompleted) follows record {n - 1} "
        "(RunCompleted), which closed the run",
    )


@pytest.mark.parametrize("index", [0, 1, -1])
def test_a_record_of_another_run_is_refused(exported: Docs, tmp_path: Path, index: int) -> None:
    doc = copy.deepcopy(exported["p-14"])
    doc["records"][index][1][1] = "f" * 32
    path = write(tmp_path, doc)
    refused(replay_file(path), path, f"is of run '{'f' * 32}', not of the document's")


def test_a_document_of_another_run_than_its_records_is_refused(
    exported: Docs, tmp_path: Path
) -> None:
    doc = copy.deepcopy(exported["p-14"])
    doc["run_id"] = "f" * 32
    path = write(tmp_path, doc)
    refused(replay_file(path), path, "record 1 (lsn", "is of run")


def test_completed_without_a_close_record_is_refused(exported: Docs, tmp_path: Path) -> None:
    doc = copy.deepcopy(exported["p-14"])
    assert doc["records"].pop()[1][0] == 6  # RunCompleted
    path = write(tmp_path, doc)
    refused(replay_file(path), path, "its status is 'completed', but no record closes the run")


def test_an_open_status_with_a_close_record_is_refused(exported: Docs, tmp_path: Path) -> None:
    doc = copy.deepcopy(exported["p-14"])
    doc["status"] = "parked"
    path = write(tmp_path, doc)
    refused(replay_file(path), path, "its status is 'parked', but its RunCompleted closes the run")


def test_dev_zero_is_refused_once_the_limit_is_read() -> None:
    path = Path("/dev/zero")
    refused(replay_file(path), path, "larger than 256 MiB, the most read")


def test_a_file_over_the_limit_is_refused_and_one_at_it_is_read(
    exported: Docs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fusee_runtime import history_doc

    text = json.dumps(exported["p-14"]).encode()
    limit = len(text) + 100
    monkeypatch.setattr(history_doc, "HISTORY_BYTES_MAX", limit)
    monkeypatch.setattr(history_doc, "READ_CHUNK_BYTES", 64)
    at = tmp_path / "at.json"
    at.write_bytes(text + b" " * (limit - len(text)))
    assert replay_file(at).exit_code == 0
    over = tmp_path / "over.json"
    over.write_bytes(text + b" " * (limit + 1 - len(text)))
    refused(replay_file(over), over, f"larger than {limit} bytes, the most read")


def test_the_python_api_raises_history_invalid(exported: Docs, tmp_path: Path) -> None:
    from fusee_runtime import Rejected
    from fusee_runtime.errors import HistoryInvalid
    from fusee_runtime.replayer import replay, replay_document

    doc = copy.deepcopy(exported["p-14"])
    doc["records"][0][1][3] = ["payment"]
    with pytest.raises(HistoryInvalid) as raised:
        asyncio.run(replay_document(doc))
    assert isinstance(raised.value, Rejected) and raised.value.path is None
    assert str(raised.value).startswith("bad history document: record 1 (lsn ")
    path = write(tmp_path, doc)
    with pytest.raises(HistoryInvalid) as raised:
        asyncio.run(replay(path))
    assert raised.value.path == str(path)
    assert str(raised.value).startswith(f"bad history file {path}: record 1 (lsn ")


# -- every mutation: a replay, or one line -------------------------------------------


Change = Callable[[Any], None]


def mutations(doc: dict[str, Any], seen: set[Any]) -> Iterator[tuple[str, bool, Change]]:
    """(what, wrong, change) for every systematic change of `doc`. `wrong`: the change
    makes a document no engine writes, which must be refused; the others may replay
    (cleanly or not) or be refused. The fields of a record type, and of the operations
    a reset run inherited, are replaced in the first document that has them (`seen`
    says which have been), so that the test stays quick."""
    from fusee_runtime.journal.records import FIELDS, R

    records = doc["records"]
    closed = bool(records) and R(records[-1][1][0]).name in CLOSES
    continued = (doc["creation"] or {}).get("kind") == "continued"
    last_kind = R(records[-1][1][0]).name if records else None
    for key in doc:
        for value in REPLACEMENTS:
            yield f"{key} = {value!r}", key != "creation" or value is not None, _put((key,), value)
        yield f"no {key}", True, _drop((key,))
    for status in Status:
        wrong = str(status) != doc["status"] and (closed or not status.is_open)
        yield f"status {status}", wrong, _put(("status",), str(status))
    for n, (_, rec) in enumerate(records):
        kind = R(rec[0])
        at = ("records", n)
        if kind not in seen:  # (what does not depend on where the record is: once a type)
            seen.add(kind)
            for i, name in enumerate(FIELDS[kind], 1):
                for value in REPLACEMENTS:
                    wrong = (
                        name == "run_id"
                        or (name not in USER_VALUES and value in (["x"], HUGE))
                        or (name not in OBJECTS and value == {"x": 1})
                    )
                    yield (
                        f"record {n + 1} {kind.name}.{name} = {value!r}",
                        wrong,
                        _put((*at, 1, i), value),
                    )
            for value in ("x", None, -1):
                yield f"record {n + 1} lsn = {value!r}", True, _put((*at, 0), value)
            yield f"record {n + 1} = 'x'", True, _put(at, "x")
            yield f"record {n + 1} payload = {{}}", True, _put((*at, 1), {})
            yield f"record {n + 1} short a field", True, _drop((*at, 1, -1))
            yield f"record {n + 1} with a field more", True, _edit(at, lambda r: r[1].append(1))
            yield f"record {n + 1} of type 99", True, _put((*at, 1, 0), 99)
            yield f"record {n + 1} of a cron schedule", True, _put((*at, 1, 0), 28)
        yield f"record {n + 1} of run 'other'", True, _put((*at, 1, 1), "other")
        first, last = n == 0, n == len(records) - 1
        must = (first and not continued) or (last and closed)
        needed = must or (kind.name == "CancelRequested" and last_kind == "RunCancelled")
        needed = needed or (len(records) == 1 and not continued)
        yield f"no record {n + 1}", needed, _drop(at)
        yield f"record {n + 1} twice", True, _twice(n, renumber=False)
        once = kind.name in ONCE | CLOSES
        yield f"record {n + 1} twice, numbered apart", once, _twice(n, renumber=True)
        if n + 1 < len(records):
            moved = must or (n + 1 == len(records) - 1 and closed)
            moved = moved or R(records[n + 1][1][0]) == R.RunStarted
            yield f"records {n + 1}, {n + 2} swapped", True, _swap(n, keep_lsns=False)
            yield f"records {n + 1}, {n + 2} swapped, lsns kept", moved, _swap(n, keep_lsns=True)
    creation = doc["creation"]
    if creation is None:
        return
    for key in creation:
        for value in REPLACEMENTS:
            fits = (
                key == "input"
                or (value == {"x": 1} and key in ("attributes", "origin", "updates_accepted"))
                or (value is None and key in ("deadline", "origin"))
            )
            yield f"creation.{key} = {value!r}", not fits, _put(("creation", key), value)
    for seq, op in creation.get("ops", {}).items():
        if "op" in seen:
            break
        seen.add("op")
        for key in op:  # (many fields of an op take null, or anything: no verdict)
            for value in REPLACEMENTS:
                yield (
                    f"creation op #{seq}.{key} = {value!r}",
                    False,
                    _put(("creation", "ops", seq, key), value),
                )


def _put(path: tuple[Any, ...], value: Any) -> Change:
    def change(d: Any) -> None:
        *into, last = path
        for key in into:
            d = d[key]
        d[last] = value

    return change


def _drop(path: tuple[Any, ...]) -> Change:
    def change(d: Any) -> None:
        *into, last = path
        for key in into:
            d = d[key]
        del d[last]

    return change


def _edit(path: tuple[Any, ...], how: Callable[[Any], Any]) -> Change:
    def change(d: Any) -> None:
        for key in path:
            d = d[key]
        how(d)

    return change


def _twice(n: int, renumber: bool) -> Change:
    def change(d: Any) -> None:
        records = d["records"]
        records.insert(n + 1, copy.deepcopy(records[n]))
        if renumber:
            for k, record in enumerate(records):
                record[0] = 10 * (k + 1)

    return change


def _swap(n: int, keep_lsns: bool) -> Change:
    def change(d: Any) -> None:
        records = d["records"]
        records[n], records[n + 1] = records[n + 1], records[n]
        if keep_lsns:
            records[n][0], records[n + 1][0] = records[n + 1][0], records[n][0]

    return change


def replay_command(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`fusee replay --history PATH`: the command's function, called as typer calls it
    (building typer's command for each of thousands of documents would take minutes),
    and its exit code, stdout and stderr."""
    from fusee_cli.commands.replay import replay

    code = 0
    try:
        replay(history=[path], app="fusee_replay_testapp")
    except typer.Exit as e:
        code = e.exit_code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.filterwarnings(
    # A replay mismatch inside ctx.race leaves its other branches' coroutines never
    # awaited, and Python says so when they are collected: the replay's doing (it did
    # so before these checks), not a document's.
    "ignore:Exception ignored in. <coroutine object:pytest.PytestUnraisableExceptionWarning"
)
def test_every_mutation_of_an_exported_history_replays_or_is_refused_in_one_line(
    exported: Docs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = {"replays cleanly": 0, "does not replay": 0, "refused": 0}
    seen: set[Any] = set()
    for name, doc in exported.items():
        original = orjson.dumps(doc)
        for k, (what, wrong, change) in enumerate(mutations(doc, seen)):
            mutated = orjson.loads(original)
            change(mutated)
            path = tmp_path / f"{name}-{k}.json"  # (a new file: quicker than truncating one)
            path.write_bytes(orjson.dumps(mutated))
            code, out, err = replay_command(path, capsys)
            where = f"{name}: {what}: exit {code}: {out}{err}"
            assert "Traceback" not in out + err, where
            if code == 2:
                assert out == "" and len(err.splitlines()) == 1, where
                assert err.startswith("error: ") and str(path) in err, where
                outcomes["refused"] += 1
                continue
            assert not wrong, f"a document no engine writes is not refused: {where}"
            assert code in (0, 1) and len(out.splitlines()) == 1, where
            assert out.startswith(("ok ", "MISMATCH ")), where
            outcomes["replays cleanly" if code == 0 else "does not replay"] += 1
    # Each kind of outcome happens: the check neither refuses nor lets through everything.
    assert all(outcomes.values()), outcomes
    assert sum(outcomes.values()) > 2000, outcomes


def test_the_field_types_cover_every_record_of_a_run() -> None:
    from fusee_runtime.history_fields import CREATIONS, FIELD_TYPES, OP_FIELDS, conforms, says
    from fusee_runtime.journal.records import FIELDS, NOT_OF_A_RUN, R
    from fusee_runtime.model.ops import OPS

    assert set(FIELD_TYPES) == set(R) - NOT_OF_A_RUN
    for kind, types in FIELD_TYPES.items():
        assert len(types) == len(FIELDS[kind]), kind
        assert FIELDS[kind][0] == "run_id", kind
    assert set(OP_FIELDS) == {name for cls in OPS.values() for name in cls.__dataclass_fields__}
    everything = [
        *(t for types in FIELD_TYPES.values() for t in types),
        *(t for fields in CREATIONS.values() for t in fields.values()),
        *OP_FIELDS.values(),
    ]
    for tp in everything:  # each one can be checked and said (or this raises)
        conforms(object(), tp)
        assert says(tp), tp
