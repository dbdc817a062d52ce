"""How `fusee serve` comes to own a home that another process holds.

A command that holds the home only to follow a run (`start`, `result --wait`,
`tail-stream`, which take it over when its owner goes away) gives it up when asked
(`Control.give_way`) and follows on through the server; one that serves no socket
(a command holding the home for a moment, an owner still opening it) lets go soon:
the server waits for it, as other commands do, for up to `connect.LOCK_WAIT_S`. A
server, or an app's own engine, refuses: the server says who holds the home.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusee_cli import session

if TYPE_CHECKING:
    from fusee_runtime import Engine


async def take_home(
    home: Path,
    stack: contextlib.AsyncExitStack,
    opening: Callable[[], contextlib.AbstractAsyncContextManager[Engine]],
    stop: Any,
) -> Engine:
    """The home's engine (`opening`), open until `stack` closes, once its holder (if
    any) gives way or lets go.

    Raises:
        Locked: the holder refuses to give way, or has not let go within `LOCK_WAIT_S`
            (or `stop` was set meanwhile).
    """
    from fusee_runtime.control.connect import LOCK_WAIT_S, RETRY_OPEN_S
    from fusee_runtime.engine.home import HomeLock

    loop = asyncio.get_running_loop()
    asked_at: float | None = None
    while True:
        try:
            return await stack.enter_async_context(opening())
        except session.Locked as locked:
            if asked_at is None:
                if not await _given_way(home):
                    raise
                asked_at = loop.time()
                pid = HomeLock(home).owner()
                holder = f"process {pid}{session.command_of(pid)}" if pid else "its holder"
                session.echo_err(f"waiting for {holder} to let go of {home}")
            elif stop.is_set() or loop.time() - asked_at > LOCK_WAIT_S:
                waited = f"waited {LOCK_WAIT_S:g} s for it to give way or let go"
                raise session.Locked(locked.code, f"{locked.message} ({waited})") from None
        await asyncio.sleep(RETRY_OPEN_S)


async def _given_way(home: Path) -> bool:
    """Asks the process that holds the home to give it up (`Control.give_way`): False if
    it will not (a server, an app's engine); True if it does (a command following a run)
    or serves no socket (a command holding it for a moment, an owner still opening):
    then the lock is worth waiting for."""
    from fusee_runtime import Rejected
    from fusee_runtime.control.client import ControlClient, OwnerGone, OwnerLost

    try:
        holder = await ControlClient.connect(home)
        if holder is None:
            return True
        await holder.give_way()
    except Rejected:
        return False
    except (OwnerGone, OwnerLost):
        pass  # it went away as it answered: the lock says
    return True
