"""The control API's operations as one typed `Protocol`: `Operations`, what may be
asked of a home (its methods, their arguments and answers), and the types they
use. `ops` makes each method a descriptor (`ops.OPS`) that every face follows.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator
from typing import Any, Literal, NotRequired, Protocol, TypedDict

from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.run import RunInfo

Args = dict[str, Any]
"""An operation's arguments as a request carries them: a JSON object, by name. Their
types are the method's (`Param`), checked when `call` passes them to it by name: mypy
cannot check a request read from the wire, and a wrong one raises `TypeError` there."""
OnConflict = Literal["return", "fail", "new_run"]
ScheduleAction = Literal["pause", "unpause", "trigger"]
BatchAction = Literal["cancel", "terminate", "signal", "reset", "resume"]


class Pong(TypedDict):
    """Who answers the control API (`ping`)."""

    pid: int
    home: str
    host: str
    journals: NotRequired[builtins.list[int]]
    """A worker of a database of several journals: the journals it drives now."""


class Throttle(TypedDict):
    """A start's throttle as the control API carries it (`Engine.start(throttle=Rate(...))`):
    at most `n` runs of the workflow (of `key`) begin in any window of `per` seconds; the
    window is the rate `name` (default: "start:<workflow>")."""

    n: int
    per: float
    key: NotRequired[str | None]
    name: NotRequired[str | None]


class Operations(Protocol):
    """The operations of the control API, whoever answers them.

    An operation that acts answers once what it recorded is durable.
    `watch` and `stream` answer with events; the others are coroutines.
    """

    async def ping(self) -> Pong:
        """Who answers: `pid`, `home`, `host`."""
        ...

    async def give_way(self) -> dict[str, Any]:
        """Asked by a server that starts (`fusee serve`) of a command that drives the home
        only to follow a run (`start`, `result --wait`, `tail-stream`): it closes the home
        so the server can take it, and follows the run on through the server; answered
        `{"pid"}` once its close began. Any other owner refuses (`Rejected`)."""
        ...

    async def start(
        self,
        workflow: str,
        input: object = None,
        id: str | None = None,
        on_conflict: OnConflict = "return",
        traceparent: str | None = None,
        start_delay: float | None = None,
        start_at: str | None = None,
        queue: str | None = None,
        queue_key: str | None = None,
        priority: int = 0,
        debounce: float | None = None,
        debounce_key: str | None = None,
        debounce_max: float | None = None,
        throttle: Throttle | None = None,
    ) -> tuple[RunInfo, bool]:
        """Starts a run (once durable); returns it and whether the id already had a run.
        `start_delay` (seconds) or `start_at` (ISO 8601, with its offset) begins it later;
        `queue`, `queue_key` and `priority` make it wait its turn in a queue; `debounce`
        (seconds), `debounce_key` and `debounce_max` (seconds) make a burst of starts one
        run; `throttle` delays it to a free slot of a window (`Engine.start`)."""
        ...

    async def update_with_start(
        self,
        workflow: str,
        id: str,
        name: str,
        input: object = None,
        arg: object = None,
        update_id: str | None = None,
        traceparent: str | None = None,
    ) -> tuple[RunInfo, object]:
        """Applies update `name` to the open run of `id`, started first if there is none
        (`Engine.start(update=...)`); returns the run and the update's result."""
        ...

    async def describe(self, id: str, run_id: str | None = None) -> RunInfo:
        """The newest run of `id` (or its run `run_id`)."""
        ...

    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        parent: str | None = None,
        where: dict[str, Any] | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        """Runs, newest first (as `Engine.list`)."""
        ...

    async def history(
        self, id: str, run_id: str | None = None, after: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """The records of every run of `id` as JSON (`records.as_json`); with `run_id`,
        those of that run and of the runs a reset run kept operations from; with `after`,
        only those past that lsn."""
        ...

    async def log(
        self, id: str, last: int = 200, run_id: str | None = None
    ) -> builtins.list[JsonObject]:
        """The last `last` `ctx.log` lines of the runs of `id`, oldest first; with
        `run_id`, of that run alone."""
        ...

    async def journal(self, id: str, run_id: str | None = None) -> dict[str, Any]:
        """The newest run of `id` (or its run `run_id`) as a history document."""
        ...

    async def run_ids(
        self, workflow: str | None = None, open: bool = False
    ) -> builtins.list[builtins.list[str]]:
        """Every run (of `workflow`; the open ones, with `open`) as `[id, run_id]` pairs."""
        ...

    async def signal(
        self,
        id: str,
        name: str,
        value: object = None,
        run_id: str | None = None,
        exact: bool = False,
    ) -> RunInfo:
        """Delivers signal `name` to the newest run of `id` (or the run a pinned handle
        acts on: `run_id`, or the run its `continue_as_new` chain reached; so for every
        act below); returns the run as it stands. With `exact`, run `run_id` alone: once
        it closed (reset, continued as new) the act is refused (`Rejected`), never sent
        on to a later run (so for cancel, terminate and resume)."""
        ...

    async def cancel(
        self, id: str, reason: str = "cancelled", run_id: str | None = None, exact: bool = False
    ) -> RunInfo:
        """Cancels the newest run of `id`; returns it as it stands."""
        ...

    async def terminate(
        self,
        id: str,
        reason: str = "terminated",
        run_id: str | None = None,
        exact: bool = False,
    ) -> RunInfo:
        """Terminates the newest run of `id`; returns it once closed."""
        ...

    async def resume(self, id: str, run_id: str | None = None, exact: bool = False) -> RunInfo:
        """Resumes the newest run of `id` (paused or stuck); returns it as it stands."""
        ...

    async def reset(self, id: str, to: int | str, run_id: str | None = None) -> RunInfo:
        """Resets the newest run of `id` to `to`; returns the new run."""
        ...

    async def complete(self, token: str, value: object = None) -> dict[str, Any]:
        """Finishes the `await_completion` that issued `token`; returns its run's id and
        the completion's name."""
        ...

    async def fail(self, token: str, message: str) -> dict[str, Any]:
        """Fails the `await_completion` that issued `token`; returns as `complete`."""
        ...

    async def completions(self, id: str, run_id: str | None = None) -> builtins.list[JsonObject]:
        """The `await_completion`s the newest run of `id` (or its run `run_id`) waits for,
        with their current tokens: `[{"step", "seq", "op", "token", "url"}]` (`url` null
        unless the HTTP API serves). Not in `describe` or `list`: a token finishes the
        step, so it is shown only to who asks for it."""
        ...

    async def query(
        self, id: str, name: str, arg: object = None, run_id: str | None = None
    ) -> object:
        """The answer of the newest run of `id` to query `name`."""
        ...

    async def update(
        self,
        id: str,
        name: str,
        arg: object = None,
        update_id: str | None = None,
        run_id: str | None = None,
    ) -> object:
        """Applies update `name` to the newest run of `id`; returns the handler's result."""
        ...

    async def object_call(
        self, id: str, handler: str, arg: object = None, call_id: str | None = None
    ) -> object:
        """Calls `handler` of the virtual object's key whose run is `id`
        (`object:<name>:<key>`), starting that run first if it has none: an exclusive
        handler waits its turn and answers once recorded (`call_id` sent again: the
        outcome recorded the first time), a shared one answers at once."""
        ...

    async def object_describe(self, id: str) -> JsonObject:
        """The key whose run is `id`: its state, its queue of calls accepted and not yet
        applied, how many were applied (`ObjectHandle.describe`)."""
        ...

    async def result(
        self, id: str, run_id: str | None = None, timeout: float | None = None
    ) -> object:
        """The result of the newest run of `id` (or of run `run_id`, pinned), once durable,
        as `RunHandle.result` waits for it: its JSON, or the engine's error (`RunFailed`,
        `Cancelled`, `Terminated`, `TimedOut`)."""
        ...

    async def batch(
        self,
        action: BatchAction,
        where: dict[str, Any] | None = None,
        workflow: str | None = None,
        status: str | None = None,
        reason: str | None = None,
        signal: str | None = None,
        value: object = None,
        to: int | str | None = None,
        rate: float | None = None,
        id: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Starts a batch doing `action` to every run the filter matches (`Engine.batch`);
        returns it as `batch_describe` shows it (with `dry_run`: the count, nothing started)."""
        ...

    async def batch_describe(self, id: str) -> JsonObject:
        """Batch `id`: its progress and each run's outcome (`Engine.describe_batch`)."""
        ...

    async def schedules(self) -> builtins.list[JsonObject]:
        """Every cron schedule."""
        ...

    async def schedule(self, name: str, action: ScheduleAction) -> Any:
        """Pauses or unpauses the schedule of workflow `name` (returns the schedule), or
        triggers a run of it now (returns the run)."""
        ...

    async def schedule_set(
        self,
        name: str,
        create: bool,
        workflow: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        overlap: str | None = None,
        catchup: str | None = None,
        input: object = None,
    ) -> JsonObject:
        """Makes schedule `name` (`create`: its `workflow` and `cron` at least), or changes
        one made at run time (the fields given); returns it as `schedules` lists it."""
        ...

    async def schedule_delete(self, name: str) -> JsonObject:
        """Deletes schedule `name`, made at run time; returns `{"name": name}`."""
        ...

    async def schedule_backfill(
        self, name: str, start: str, end: str
    ) -> builtins.list[builtins.list[str]]:
        """Starts the runs of schedule `name` for its instants in [`start`, `end`) (ISO 8601),
        by its overlap; each instant's `[run id, "started" | "existed" | "skipped"]`."""
        ...

    async def prune(self, older_than: float) -> int:
        """Deletes the runs closed more than `older_than` seconds ago; returns how many."""
        ...

    async def limits(self) -> builtins.list[JsonObject]:
        """Every limit set or in use (`LimitInfo` as a mapping)."""
        ...

    async def limit(self, name: str, permits: int, per_s: float | None = None) -> JsonObject:
        """Sets limit `name`'s size; returns the limit as `limits` shows it. With
        `per_s`, sets instead rate `name`: `permits` attempts in any `per_s` seconds."""
        ...

    async def queues(self) -> builtins.list[JsonObject]:
        """Every queue of runs set or in use (`QueueInfo` as a mapping), by name."""
        ...

    async def queue(
        self, name: str, concurrency: int | None = None, per_key: int | None = None
    ) -> JsonObject:
        """Sets queue `name`'s sizes (None: any number; 0: none goes in), both at once;
        returns the queue as `queues` shows it."""
        ...

    def watch(self, id: str, timeout: float | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """Follows the newest run of `id`: progress events, then one outcome."""
        ...

    def stream(
        self, id: str, name: str, follow: bool = True, run_id: str | None = None
    ) -> AsyncGenerator[Json, None]:
        """The durable items of stream `name` of the newest run of `id` (or of `run_id`)."""
        ...
