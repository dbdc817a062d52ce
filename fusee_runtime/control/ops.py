"""The control API's operations, declared once: what may be asked of a home.

A command (`fusee signal`), a program and a web hook ask a home the same
operations, with the same values and the same errors, whoever answers.
`Operations` (`control/operations.py`) declares them: one typed method each.
Every operation also has a descriptor made from its method (`Call`, or
`Stream` for one that answers with events), which says what the faces need
to know of it:

- `name`: its name on the wire (the method's), the `op` of a request line;
- `params`: its arguments, read from the method's signature (names, types,
  defaults), so they are written once;
- `streams`: whether it answers with events (`watch`, `stream`);
- `acts`: whether it changes something (records, deletes, sets) or only reads;
- `route`: where a router between the journals of a database sends it (`Route`);
- `http`: whether the HTTP API serves it (`routes.ROUTES` names its routes);
- `call`: the operation called on an implementation of `Operations`, with
  its arguments as sent: `lambda o, a: o.describe(**a)`, so an operation is
  reached by a typed call, never looked up by its name;
- `answer` (a `Call`'s): how a client reads its JSON answer back;
  `merge` (a `Call` sent to every journal): how the answers make one.

`OPS` holds the descriptors by wire name. The faces follow from it:

- `api.Control` implements `Operations` on an engine in this process;
- `server.ControlServer` looks a request's `op` up in `OPS` and answers with
  its `call` on a `Control` (no name outside `OPS` is served);
- `client.Client` implements `Operations` over any transport that carries a
  descriptor and its JSON arguments there and the answer back (the home's
  socket, the database, several journals' drivers through a router, an
  engine of this process); its methods send their descriptor by value;
- `router.ShardRouter` routes each call by its descriptor's `route`, merging
  with its `merge`;
- the HTTP routes (`routes.ROUTES`) each name the descriptor they serve.

tests/engine/test_control_ops.py fails when a face misses an operation.
"""

from __future__ import annotations

import builtins
import enum
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import (
    ClassVar,
    Concatenate,
    Generic,
    ParamSpec,
    TypeVar,
    cast,
)

from fusee_runtime.control.operations import Args as Args
from fusee_runtime.control.operations import BatchAction as BatchAction
from fusee_runtime.control.operations import OnConflict as OnConflict
from fusee_runtime.control.operations import Operations as Operations
from fusee_runtime.control.operations import Pong as Pong
from fusee_runtime.control.operations import ScheduleAction as ScheduleAction
from fusee_runtime.control.operations import Throttle as Throttle
from fusee_runtime.control.wire import RunJson, run_info
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.run import RunInfo

P = ParamSpec("P")
R = TypeVar("R", covariant=True)
E = TypeVar("E", covariant=True)


class Route(enum.Enum):
    """Where a router between the journals of a database sends an operation
    (`router.ShardRouter`; with one journal, everything goes to it)."""

    ID = "id"
    """The journal the `id` argument belongs to: every run of an id is there."""
    ANY = "any"
    """A start: the journal of its id, or without one any journal a worker drives."""
    TOKEN = "token"
    """Each journal in turn, until one knows the completion token."""
    EVERY = "every"
    """Every journal; the answers merged into one (`Call.merge`)."""
    FIRST = "first"
    """Journal 0: the schedules live there (they fire there alone)."""


@dataclass(frozen=True)
class Param:
    """One argument of an operation, as its method in `Operations` declares it."""

    name: str
    type: object
    """The annotation, evaluated: `str`, `int | str`, `Literal[...]`, ..."""
    required: bool
    default: object = None
    """What the method takes when it is not given (None for a required one)."""


@dataclass(frozen=True, eq=False)
class Call(Generic[P, R]):
    """An operation that answers once (see the module); `R` is what a client reads back."""

    name: str
    params: tuple[Param, ...]
    acts: bool
    route: Route
    http: bool
    call: Callable[[Operations, Args], Awaitable[object]]
    answer: Callable[[Json, Args], R]
    merge: Callable[[builtins.list[Json], Args], Json] | None = None
    streams: ClassVar[bool] = False

    def __post_init__(self) -> None:
        assert (self.route is Route.EVERY) == (self.merge is not None), self.name


@dataclass(frozen=True, eq=False)
class Stream(Generic[P, E]):
    """An operation that answers with events, then ends (see the module); `E` is an
    event as a client reads it."""

    name: str
    params: tuple[Param, ...]
    acts: bool
    route: Route
    http: bool
    call: Callable[[Operations, Args], AsyncGenerator[object, None]]
    streams: ClassVar[bool] = True


Op = Call[..., object] | Stream[..., object]
"""Any operation's descriptor."""


def _params(method: Callable[..., object]) -> tuple[Param, ...]:
    """The arguments of a method of `Operations`, without `self`."""
    params = []
    for p in list(inspect.signature(method, eval_str=True).parameters.values())[1:]:
        required = p.default is p.empty
        params.append(Param(p.name, p.annotation, required, None if required else p.default))
    return tuple(params)


def _call(
    method: Callable[Concatenate[Operations, P], Awaitable[object]],
    call: Callable[[Operations, Args], Awaitable[object]],
    answer: Callable[[Json, Args], R],
    *,
    acts: bool,
    route: Route,
    http: bool,
    merge: Callable[[builtins.list[Json], Args], Json] | None = None,
) -> Call[P, R]:
    """The descriptor of `method`, an operation that answers once: its name and arguments
    are the method's."""
    return Call(method.__name__, _params(method), acts, route, http, call, answer, merge)


def _stream(
    method: Callable[Concatenate[Operations, P], AsyncGenerator[E, None]],
    call: Callable[[Operations, Args], AsyncGenerator[object, None]],
    *,
    route: Route,
    http: bool,
) -> Stream[P, E]:
    """The descriptor of `method`, an operation that answers with events (it only reads)."""
    return Stream(method.__name__, _params(method), False, route, http, call)


# -- how a client reads an answer back, and how a router merges answers ---------------
#
# An answer comes back as JSON: what the method of `Operations` returned, as `wire.as_json`
# writes it. The casts below say so for the answers that stay JSON (mypy cannot see
# across the wire).


def _as_sent(answer: Json, args: Args) -> Json:
    return answer


def _pong(answer: Json, args: Args) -> Pong:
    return cast(Pong, answer)  # a `Pong`, as JSON


def _object(answer: Json, args: Args) -> JsonObject:
    return cast(JsonObject, answer)  # a history document, a limit, a finished completion


def _objects(answer: Json, args: Args) -> builtins.list[JsonObject]:
    return cast(builtins.list[JsonObject], answer)  # records, log lines, tokens, limits, ...


def _pairs(answer: Json, args: Args) -> builtins.list[builtins.list[str]]:
    return cast(builtins.list[builtins.list[str]], answer)  # `[id, run_id]` pairs


def _count(answer: Json, args: Args) -> int:
    return cast(int, answer)  # how many runs were pruned


def _run(answer: Json, args: Args) -> RunInfo:
    return run_info(cast(RunJson, answer))


def _runs(answer: Json, args: Args) -> builtins.list[RunInfo]:
    return [run_info(doc) for doc in cast(builtins.list[RunJson], answer)]


def _started(answer: Json, args: Args) -> tuple[RunInfo, bool]:
    info, existed = cast(builtins.list[Json], answer)  # [the run, whether it existed]
    return run_info(cast(RunJson, info)), cast(bool, existed)


def _updated(answer: Json, args: Args) -> tuple[RunInfo, Json]:
    info, result = cast(builtins.list[Json], answer)  # [the run, the update's result]
    return run_info(cast(RunJson, info)), result


def _acted(answer: Json, args: Args) -> RunInfo | None:
    """The run an act answered with; None from an owner of an older version, which
    answered null (the client then describes the run)."""
    return run_info(cast(RunJson, answer)) if answer is not None else None


def _scheduled(answer: Json, args: Args) -> RunInfo | Json:
    return run_info(cast(RunJson, answer)) if args["action"] == "trigger" else answer


def _newest_first(answers: builtins.list[Json], args: Args) -> Json:
    runs = cast(builtins.list[builtins.list[JsonObject]], answers)  # each journal's runs
    merged = [doc for answer in runs for doc in answer]
    merged.sort(key=lambda doc: cast(str, doc["started_at"]), reverse=True)  # ISO 8601
    newest = merged[: args["limit"]] if args.get("limit") else merged
    return cast(Json, newest)  # a list of JSON objects is JSON (mypy: lists are invariant)


def _joined(answers: builtins.list[Json], args: Args) -> Json:
    lists = cast(builtins.list[builtins.list[Json]], answers)  # each journal's list
    return [item for answer in lists for item in answer]


def _summed(answers: builtins.list[Json], args: Args) -> Json:
    return sum(cast(builtins.list[int], answers))  # each journal's count


def _first(answers: builtins.list[Json], args: Args) -> Json:
    """Each journal's engine has the limit's permits: set on every one, alike."""
    return answers[0]


_QUEUE_COUNTS = ("running", "queued", "keys")
"""The fields of a queue's row that count its runs: each journal's, added up."""


def _queues_added(answers: builtins.list[Json], args: Args) -> Json:
    """Each journal's queues (a queue is a journal's, set on every one alike): one row a
    name, its runs in, runs waiting and keys added up; its sizes as a journal that set
    them has them."""
    rows = cast(builtins.list[builtins.list[JsonObject]], answers)  # each journal's queues
    merged: dict[str, JsonObject] = {}
    for row in (row for answer in rows for row in answer):
        name = cast(str, row["name"])
        seen = merged.get(name)
        if seen is None:
            merged[name] = dict(row)
            continue
        for field in _QUEUE_COUNTS:
            seen[field] = cast(int, seen[field]) + cast(int, row[field])
        if row["set"] and not seen["set"]:
            seen.update(concurrency=row["concurrency"], per_key=row["per_key"], set=True)
    return [merged[name] for name in sorted(merged)]


def _queue_added(answers: builtins.list[Json], args: Args) -> Json:
    """The queue set on every journal alike: one row, its counts added up."""
    (row,) = cast(builtins.list[Json], _queues_added([[answer] for answer in answers], args))
    return row


# -- the operations -------------------------------------------------------------------

PING = _call(
    Operations.ping, lambda o, a: o.ping(**a), _pong, acts=False, route=Route.FIRST, http=True
)
GIVE_WAY = _call(
    Operations.give_way,
    lambda o, a: o.give_way(**a),
    _object,
    acts=False,
    route=Route.FIRST,
    http=False,
)
START = _call(
    Operations.start, lambda o, a: o.start(**a), _started, acts=True, route=Route.ANY, http=True
)
UPDATE_WITH_START = _call(
    Operations.update_with_start,
    lambda o, a: o.update_with_start(**a),
    _updated,
    acts=True,
    route=Route.ID,
    http=False,
)
DESCRIBE = _call(
    Operations.describe, lambda o, a: o.describe(**a), _run, acts=False, route=Route.ID, http=True
)
LIST = _call(
    Operations.list,
    lambda o, a: o.list(**a),
    _runs,
    acts=False,
    route=Route.EVERY,
    http=True,
    merge=_newest_first,
)
HISTORY = _call(
    Operations.history, lambda o, a: o.history(**a), _objects, acts=False, route=Route.ID, http=True
)
LOG = _call(
    Operations.log, lambda o, a: o.log(**a), _objects, acts=False, route=Route.ID, http=False
)
JOURNAL = _call(
    Operations.journal,
    lambda o, a: o.journal(**a),
    _object,
    acts=False,
    route=Route.ID,
    http=False,
)
RUN_IDS = _call(
    Operations.run_ids,
    lambda o, a: o.run_ids(**a),
    _pairs,
    acts=False,
    route=Route.EVERY,
    http=False,
    merge=_joined,
)
SIGNAL = _call(
    Operations.signal, lambda o, a: o.signal(**a), _acted, acts=True, route=Route.ID, http=True
)
CANCEL = _call(
    Operations.cancel, lambda o, a: o.cancel(**a), _acted, acts=True, route=Route.ID, http=True
)
TERMINATE = _call(
    Operations.terminate,
    lambda o, a: o.terminate(**a),
    _acted,
    acts=True,
    route=Route.ID,
    http=True,
)
RESUME = _call(
    Operations.resume, lambda o, a: o.resume(**a), _acted, acts=True, route=Route.ID, http=True
)
RESET = _call(
    Operations.reset, lambda o, a: o.reset(**a), _run, acts=True, route=Route.ID, http=True
)
COMPLETE = _call(
    Operations.complete,
    lambda o, a: o.complete(**a),
    _object,
    acts=True,
    route=Route.TOKEN,
    http=True,
)
FAIL = _call(
    Operations.fail, lambda o, a: o.fail(**a), _object, acts=True, route=Route.TOKEN, http=True
)
COMPLETIONS = _call(
    Operations.completions,
    lambda o, a: o.completions(**a),
    _objects,
    acts=False,
    route=Route.ID,
    http=True,
)
QUERY = _call(
    Operations.query, lambda o, a: o.query(**a), _as_sent, acts=False, route=Route.ID, http=True
)
UPDATE = _call(
    Operations.update, lambda o, a: o.update(**a), _as_sent, acts=True, route=Route.ID, http=True
)
OBJECT_CALL = _call(
    Operations.object_call,
    lambda o, a: o.object_call(**a),
    _as_sent,
    acts=True,
    route=Route.ID,
    http=True,
)
OBJECT_DESCRIBE = _call(
    Operations.object_describe,
    lambda o, a: o.object_describe(**a),
    _object,
    acts=False,
    route=Route.ID,
    http=True,
)
RESULT = _call(
    Operations.result, lambda o, a: o.result(**a), _as_sent, acts=False, route=Route.ID, http=False
)
BATCH = _call(
    Operations.batch, lambda o, a: o.batch(**a), _object, acts=True, route=Route.ANY, http=True
)
BATCH_DESCRIBE = _call(
    Operations.batch_describe,
    lambda o, a: o.batch_describe(**a),
    _object,
    acts=False,
    route=Route.ID,
    http=True,
)
SCHEDULES = _call(
    Operations.schedules,
    lambda o, a: o.schedules(**a),
    _objects,
    acts=False,
    route=Route.FIRST,
    http=True,
)
SCHEDULE = _call(
    Operations.schedule,
    lambda o, a: o.schedule(**a),
    _scheduled,
    acts=True,
    route=Route.FIRST,
    http=True,
)
SCHEDULE_SET = _call(
    Operations.schedule_set,
    lambda o, a: o.schedule_set(**a),
    _object,
    acts=True,
    route=Route.FIRST,
    http=True,
)
SCHEDULE_DELETE = _call(
    Operations.schedule_delete,
    lambda o, a: o.schedule_delete(**a),
    _object,
    acts=True,
    route=Route.FIRST,
    http=True,
)
SCHEDULE_BACKFILL = _call(
    Operations.schedule_backfill,
    lambda o, a: o.schedule_backfill(**a),
    _pairs,
    acts=True,
    route=Route.FIRST,
    http=True,
)
PRUNE = _call(
    Operations.prune,
    lambda o, a: o.prune(**a),
    _count,
    acts=True,
    route=Route.EVERY,
    http=False,
    merge=_summed,
)
LIMITS = _call(
    Operations.limits,
    lambda o, a: o.limits(**a),
    _objects,
    acts=False,
    route=Route.FIRST,
    http=False,
)
LIMIT = _call(
    Operations.limit,
    lambda o, a: o.limit(**a),
    _object,
    acts=True,
    route=Route.EVERY,
    http=False,
    merge=_first,
)
QUEUES = _call(
    Operations.queues,
    lambda o, a: o.queues(**a),
    _objects,
    acts=False,
    route=Route.EVERY,
    http=True,
    merge=_queues_added,
)
QUEUE = _call(
    Operations.queue,
    lambda o, a: o.queue(**a),
    _object,
    acts=True,
    route=Route.EVERY,
    http=True,
    merge=_queue_added,
)
WATCH = _stream(Operations.watch, lambda o, a: o.watch(**a), route=Route.ID, http=True)
STREAM = _stream(Operations.stream, lambda o, a: o.stream(**a), route=Route.ID, http=False)

OPS: dict[str, Op] = {
    op.name: op
    for op in (
        *(PING, GIVE_WAY, START, UPDATE_WITH_START, DESCRIBE, LIST, HISTORY, LOG, JOURNAL),
        RUN_IDS,
        *(SIGNAL, CANCEL, TERMINATE, RESUME, RESET, COMPLETE, FAIL, COMPLETIONS),
        *(QUERY, UPDATE, RESULT),
        *(OBJECT_CALL, OBJECT_DESCRIBE, BATCH, BATCH_DESCRIBE),
        *(SCHEDULES, SCHEDULE, SCHEDULE_SET, SCHEDULE_DELETE, SCHEDULE_BACKFILL),
        *(PRUNE, LIMITS, LIMIT, QUEUES, QUEUE, WATCH, STREAM),
    )
}
"""Every operation, by its name on the wire."""
