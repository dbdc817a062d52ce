"""What `Engine` offers to call into a run from outside its code: its query and update
handlers, the completion tokens of its `await_completion` steps, and the virtual
objects' keys. The work is `Handlers`' (`engine/handlers.py`) and `Objects`'
(`engine/objects.py`)."""

from __future__ import annotations

from typing import Any

from fusee_runtime.completions import Awaited
from fusee_runtime.engine.handlers import Handlers
from fusee_runtime.engine.objects import ObjectHandle, Objects
from fusee_runtime.errors import Failure


class Calls:
    """What `Engine` offers of its runs' handlers, completions and objects."""

    handlers: Handlers
    objects: Objects

    async def query(
        self, id: str, name: str, arg: object = None, *, run_id: str | None = None
    ) -> Any:
        """The answer of the newest run of `id` to query `name` (its `ctx.on_query`).

        Raises:
            NotFound: no run of that id.
            Rejected: no handler of that name (the message lists the run's
                handlers), no code running here to answer, or the handler
                raised (its message).
            CodecError: the answer cannot be encoded as JSON.
        """
        return await self.handlers.query(id, name, arg, run_id)

    async def update(
        self,
        id: str,
        name: str,
        arg: object = None,
        update_id: str | None = None,
        *,
        run_id: str | None = None,
    ) -> Any:
        """Applies update `name` to the newest run of `id` (its `ctx.on_update` handler);
        returns the handler's result once the update is durable.

        An update sent again with the same `update_id` is not applied again:
        the caller gets the first one's result.

        Raises:
            NotFound: no run of that id.
            Rejected: the run is closed, has no such handler, no code runs here
                to apply it, its code is inside `ctx.all`/`ctx.race` or still
                replaying, the validator refused it, or the handler raised
                (with its message).
            CodecError: the argument or the result cannot be encoded as JSON, or the
                argument does not decode into the handler's annotation.
            JournalFailed: the journal failed before the update was applied and durable.
        """
        return await self.handlers.update(id, name, arg, update_id, run_id)

    async def complete(self, token: str, value: object = None) -> None:
        """Finishes the `await_completion` that issued `token` with `value`; returns once
        that is durable.

        Raises:
            NotFound: not a token of this home, or its run is gone.
            Rejected: the run is closed, the step already finished, or a later
                attempt superseded the token; or the step is paused, or resumed and
                its new token not issued yet: no token finishes it until `resume`
                sends again with a new one.
            CodecError: the value cannot be encoded as JSON.
        """
        await self.handlers.finish(token, value, None)

    async def fail(self, token: str, error: str | Failure) -> None:
        """Fails the `await_completion` that issued `token`: it raises `StepFailed` in the
        workflow, with `error` (a message, or a `Failure`). Raises as `complete` does."""
        await self.handlers.finish(token, None, error)

    async def completions(self, id: str, *, run_id: str | None = None) -> list[Awaited]:
        """The `await_completion`s the newest run of `id` (or its run `run_id`) waits for,
        in the order they began, each an `Awaited` (`fusee_runtime.completions`): the
        step's name (`step`), its operation (`op`, "3" or "3.0.1"), and its current token
        as a `Completion` (with the URL that completes it, when `http_url` is set), the
        one `complete` takes now; a token a retry or a resume replaced is not there.
        Empty for a run that waits for none (a paused step waits for `resume`), or is
        closed. Tokens are computed from the home's secret, never stored: whoever may
        call this may finish the run's steps.

        Raises:
            NotFound: no such run.
        """
        return self.handlers.awaited(id, run_id)

    def object(self, name: str, key: str) -> ObjectHandle:
        """Key `key` of virtual object `name` (`@object`): `call(handler, arg)`, `get()`.
        See `fusee_runtime.objects`."""
        return ObjectHandle(self.objects, name, key)
