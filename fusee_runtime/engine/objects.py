"""Virtual objects in the engine: each key a run, its calls that run's updates and
queries (`fusee_runtime.objects` says what users write and what they get)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import orjson

from fusee_runtime.dsl import WorkflowDef
from fusee_runtime.errors import FuseeError, NotFound, Rejected
from fusee_runtime.objects import OBJECT_PREFIX, STATE, Handler, ObjectDef, object_id, registry
from fusee_runtime.scope import NAME_CHARS_MAX, fresh_id, step_var
from fusee_runtime.store.shards import shard_of
from fusee_runtime.typed import parameter

if TYPE_CHECKING:
    from fusee_runtime.context import Ctx
    from fusee_runtime.control.operations import Operations
    from fusee_runtime.engine.engine import Engine

Peers = Callable[[int, Callable[["Operations"], Awaitable[Any]]], Awaitable[Any]]
"""`peers(k, ask)`: what `ask` answers of journal k's driver, asked again (through the
database) until it answers for sure (`control.router.relay`)."""

log = logging.getLogger("fusee")

NEVER = "fusee.never"
"""The signal an object's run waits for, for ever: one sent by hand is dropped, and the
run waits again (a key's run closes only when terminated or cancelled)."""


def definition(obj: ObjectDef) -> WorkflowDef:
    """The workflow of `obj`'s runs: its handlers over an instance, then a wait forever."""

    async def code(ctx: Ctx, state: dict[str, Any] | None) -> None:
        cls: Any = obj.cls
        instance = cls() if state is None else cls.__new__(cls)
        if state is not None:
            vars(instance).update(state)
        for h in obj.handlers.values():
            if h.shared:
                ctx.on_query(h.name, _shared(instance, ctx, h))
            else:
                ctx.on_update(h.name, _exclusive(instance, ctx, h))
        ctx.on_query(STATE, lambda _: dict(vars(instance)))
        while True:  # (a signal sent to it by hand is taken and dropped: the key lives on)
            await ctx.wait_for(NEVER)

    return WorkflowDef(obj.workflow, code)


def _exclusive(instance: object, ctx: Ctx, h: Handler) -> Any:
    async def apply(arg: Any = None) -> Any:
        result = h.fn(instance, ctx, arg) if h.takes_arg else h.fn(instance, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result

    # Its argument typed as the handler's (`fusee_runtime.typed` reads it), so the update
    # machinery reads it back into that type, as it does for a workflow's handlers.
    apply.__annotations__ = _argument_hint(h)
    return apply


def _argument_hint(h: Handler) -> dict[str, Any]:
    """`h`'s argument annotation, resolved, as `arg`'s; {} when it has none here."""
    try:
        hints = typing.get_type_hints(h.fn)
    except Exception:  # a name that does not resolve here: plain JSON, as typed does
        return {}
    names = list(inspect.signature(h.fn).parameters)
    return {"arg": hints[names[2]]} if h.takes_arg and names[2] in hints else {}


def _shared(instance: object, ctx: Ctx, h: Handler) -> Any:
    def read(arg: Any = None) -> Any:
        return h.fn(instance, ctx, arg) if h.takes_arg else h.fn(instance, ctx)

    return read


def defined(name: str) -> WorkflowDef | None:
    """The workflow `fusee.object.<name>` of a registered object, or None."""
    if not name.startswith(OBJECT_PREFIX):
        return None
    obj = registry().get(name[len(OBJECT_PREFIX) :])
    return definition(obj) if obj is not None else None


class Objects:
    """Calls to objects' keys, from outside and from workflows' steps.

    With several journals in a PostgreSQL database, a key lives in the journal its
    run's id belongs to, as any run does. A call to a key of another journal goes
    through the database to that journal's driver (`peers`: set by the worker that
    drives this engine), with a call id (one is made if none is given), sent again
    with that id until the key's driver answers: each call reaches the key once,
    whichever process drives it, whatever dies meanwhile. An engine that is not a
    worker's (a command's, with nobody driving that journal) refuses such a call.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.peers: Peers | None = None
        """The drivers of the database's other journals (see `Peers`)."""

    @staticmethod
    def defined(name: str) -> ObjectDef:
        """The registered object `name`, or NotFound naming those there are."""
        obj = registry().get(name)
        if obj is None:
            known = ", ".join(sorted(registry())) or "none"
            raise NotFound(f"no object {name!r}; objects: {known}")
        return obj

    def handler(self, name: str, handler: str) -> Handler:
        obj = self.defined(name)
        h = obj.handlers.get(handler)
        if h is None:
            raise NotFound(
                f"object {name!r} has no handler {handler!r}; its handlers: "
                + ", ".join(sorted(obj.handlers))
            )
        return h

    async def call(
        self, name: str, key: str, handler: str, arg: Any = None, update_id: str | None = None
    ) -> Any:
        """Calls `handler` of key `key`, starting its run first if it has none."""
        h = self.handler(name, handler)
        id = object_id(name, key)
        if (elsewhere := self._elsewhere(id)) is not None:
            call_id = fresh_id() if update_id is None else update_id
            # Sent as JSON, typed as the handler takes it (as a call in this engine is).
            what = f"the argument of {name}.{handler}"
            shape = parameter(h.fn, 2) if h.takes_arg else None
            sent = orjson.loads(self.engine.driver.encode(arg, what, shape))
            return await self._sent(elsewhere, lambda c: c.object_call(id, handler, sent, call_id))
        wf = self.engine.driver.workflow(OBJECT_PREFIX + name)  # (its def: started by no name)
        await self.engine.start(wf, None, id=id, on_conflict="return")
        if h.shared:
            return await self.engine.query(id, handler, arg)
        return await self.engine.update(id, handler, arg, update_id=update_id)

    async def get(self, name: str, key: str) -> dict[str, Any]:
        """The state of key `key` (NotFound: no call has reached it yet)."""
        self.defined(name)
        id = object_id(name, key)
        if (elsewhere := self._elsewhere(id)) is not None:
            return cast(dict[str, Any], await self._sent(elsewhere, lambda c: c.query(id, STATE)))
        state: dict[str, Any] = await self.engine.query(id, STATE)
        return state

    async def describe(self, name: str, key: str) -> dict[str, Any]:
        """Key `key` as a page shows it: its run, its state, the exclusive calls accepted
        and not yet applied (`queue`, in the order they take their turn: the first one is
        being applied unless the run is parked) and how many were applied (`applied`).

        Raises:
            NotFound: no such object, or no call has reached the key yet.
        """
        self.defined(name)
        id = object_id(name, key)
        if (elsewhere := self._elsewhere(id)) is not None:
            return cast(
                dict[str, Any], await self._sent(elsewhere, lambda c: c.object_describe(id))
            )
        run = self.engine.runs.latest(id)
        if run.workflow != OBJECT_PREFIX + name:
            raise NotFound(f"{id!r} is a run of workflow {run.workflow!r}, not a key of {name!r}")
        state = None
        if run.is_open:
            with contextlib.suppress(FuseeError):  # (stuck, say: its status says why)
                state = await self.engine.query(id, STATE)
        done = run.updates_done
        queue = [
            {"call_id": update_id, "handler": handler, "arg": arg}
            for entries in run.update_log.values()
            for update_id, handler, arg in entries
            if update_id in run.updates_accepted and update_id not in done and run.is_open
        ]
        return {
            "object": name,
            "key": key,
            "id": id,
            "run_id": run.run_id,
            "status": str(run.info().status),
            "state": state,
            "queue": queue,
            "applied": len(done),
        }

    def here(self, id: str) -> bool:
        """Whether the run of `id` is this engine's (else another journal's)."""
        return self._journal_of(id) is None

    def reachable(self, id: str) -> bool:
        """Whether this engine can call the run of `id`: its own, or another journal's
        through a worker's peers."""
        return self.peers is not None or self._journal_of(id) is None

    def _journal_of(self, id: str) -> int | None:
        """The journal of `id` when it is another than this engine's, else None."""
        k, n = self.engine.driver.shard
        home = shard_of(id, n)
        return None if home == k else home

    def _elsewhere(self, id: str) -> int | None:
        """As `_journal_of`, for a call that goes there.

        Raises:
            Rejected: it is another, and this engine reaches no other (not a worker's).
        """
        home = self._journal_of(id)
        if home is not None and self.peers is None:
            k, n = self.engine.driver.shard
            raise Rejected(
                f"{id!r} lives in journal {home} of the {n} in this database, and this "
                f"engine (journal {k}) is not a worker's: calls between journals go "
                "through the workers (fusee --store URL serve)"
            )
        return home

    async def _sent(self, k: int, ask: Callable[[Operations], Awaitable[Any]]) -> Any:
        assert self.peers is not None
        return await self.peers(k, ask)


def _call_id(key: str) -> str:
    """A caller step's idempotency key as a call id: within the update id's length (a
    long workflow id makes a longer key), the same each time for the same key."""
    if len(key) <= NAME_CHARS_MAX:
        return key
    return "step-" + hashlib.sha256(key.encode()).hexdigest()


class ObjectHandle:
    """Key `key` of object `name`, from outside: `engine.object(name, key)`."""

    def __init__(self, objects: Objects, name: str, key: str) -> None:
        self._objects, self.name, self.key = objects, name, key

    @property
    def id(self) -> str:
        """The id of the run that holds the key."""
        return object_id(self.name, self.key)

    async def call(self, handler: str, arg: Any = None, update_id: str | None = None) -> Any:
        """Calls a handler: exclusive ones one at a time, in order; `update_id` makes a
        call sent again (a retry) reach the object once."""
        return await self._objects.call(self.name, self.key, handler, arg, update_id)

    async def get(self) -> dict[str, Any]:
        """The key's state: its instance's attributes."""
        return await self._objects.get(self.name, self.key)

    async def describe(self) -> dict[str, Any]:
        """Its run, state and queue of calls (`Objects.describe`)."""
        return await self._objects.describe(self.name, self.key)


class ObjectRef:
    """Key `key` of object `name`, from a workflow: `ctx.object(name, key)`."""

    def __init__(self, ctx: Ctx, objects: Objects, name: str, key: str) -> None:
        self._ctx, self._objects, self.name, self.key = ctx, objects, name, key

    async def call(self, handler: str, arg: Any = None) -> Any:
        """Calls a handler, as one operation of this run (a step named `<object>.<handler>`):
        it reaches the object once, whatever crashes, and returns its result."""
        from fusee_runtime.scope import current_ctx

        self._objects.handler(self.name, handler)  # (NotFound before anything is recorded)
        if self._ctx.workflow_id == object_id(self.name, self.key):
            raise Rejected(
                f"a handler of {self.name}:{self.key} calls its own key: it would wait for itself"
            )
        if step_var.get() is not None:
            raise Rejected(
                f"ctx.object({self.name!r}, ...).call inside a step function: call objects "
                "from the workflow's code (each call is a step of its own)"
            )
        objects, name, key = self._objects, self.name, self.key
        id = object_id(name, key)

        async def send() -> Any:
            engine = objects.engine
            workers, wake = engine.driver.workers, engine.durability.progressed
            call_id = _call_id(current_ctx().key())
            try:
                if not objects.reachable(id):
                    # A command's engine on a journal no worker drives: the call is made
                    # once a worker drives this run (not a failure of the caller's).
                    log.warning(
                        "fusee: run %r waits for a worker to call %s",
                        current_ctx().workflow_id,
                        id,
                    )
                elif not objects.here(id):
                    # Another process answers: a wait worth a close's grace.
                    return await objects.call(name, key, handler, arg, call_id)
                else:
                    # The key's run is this engine's: it stops with the engine, and so
                    # may this wait (a close need not give it its grace).
                    with workers.holding_no_grace(wake):
                        return await objects.call(name, key, handler, arg, call_id)
            except Exception:
                if not engine.driver.closing:
                    raise
            # The engine stops under the call (or cannot make it): not an outcome to
            # record. The step is left to the engine's close to cut off, and runs again
            # in the next life, with the same key (the object answers what it recorded).
            with workers.holding_no_grace(wake):
                await asyncio.Event().wait()
            raise AssertionError("unreachable: the close cancels the wait")

        return await self._ctx.step(f"{name}.{handler}", send)
