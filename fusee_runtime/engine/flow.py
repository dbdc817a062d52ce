"""The engine's flow control, as `Engine` offers it: the sizes of the named limits
(`limit=`, how many attempts at once), of the rates over time (`rate=`, how many
attempts start in a window) and of the queues of runs (`start(queue=...)`, how many
runs at once), and what each is doing now. The work is `Limits`' (`engine/limits.py`),
`Rates`' (`engine/rates.py`) and `Queues`' (`engine/queues.py`)."""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import TYPE_CHECKING

from fusee_runtime.dsl import Rate
from fusee_runtime.engine.limits import LimitInfo
from fusee_runtime.engine.queues import QueueInfo
from fusee_runtime.engine.rates import RateInfo
from fusee_runtime.errors import Rejected

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver


class Keep:
    """A size not given to `Engine.queue`: it keeps its value."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep()


class FlowControl:
    """What `Engine` offers of its limits and rates."""

    driver: Driver

    async def limit(self, name: str, permits: int) -> None:
        """Sets how many attempts of the steps with `limit=name` run at once (of each
        key, with `limit_key`; 0: none); returns once durable: it holds after a restart.

        Raises:
            Rejected: not a limit name, or permits not from 0 to `limits.PERMITS_MAX`.
        """
        self.driver.check_accepting()
        await self.driver.limits.set(name, permits)

    async def rate(self, name: str, permits: int, per: float | timedelta) -> None:
        """Sets rate `name` (and each of its keys) to `permits` attempts in any window of
        `per`, from now on, whatever its steps' `Rate` says; returns once durable: it
        holds after a restart.

        Raises:
            Rejected: not a rate name, permits not from 1 to `RATE_MAX`, per not positive.
        """
        self.driver.check_accepting()
        try:
            size = Rate(permits, per=per, name=name)
        except ValueError as e:
            raise Rejected(str(e).removeprefix("Rate: ").replace("n is", "permits is")) from None
        await self.driver.limits.rates.set(name, size.n, size.per_s)

    def rates(self) -> builtins.list[RateInfo]:
        """Every rate over time in use (`Rate`): its window by name, slots taken lately,
        waiting attempts, its next free slot."""
        return self.driver.limits.rates.list()

    async def queue(
        self, name: str, concurrency: int | Keep | None = KEEP, per_key: int | Keep | None = KEEP
    ) -> None:
        """Sets how many runs of queue `name` run at once (`concurrency`), and of each
        of its keys (`per_key`); None: any number, 0: none (the queue waits); a size not
        given keeps its value (a queue never set runs one at a time, any number a key).
        Returns once durable: it holds after a restart.

        Raises:
            Rejected: not a queue name, or a size not None nor from 0 to `RUNS_MAX`.
        """
        self.driver.check_accepting()
        queues = self.driver.limits.queues
        now = queues.size(name)
        given = (
            now[0] if isinstance(concurrency, Keep) else concurrency,
            now[1] if isinstance(per_key, Keep) else per_key,
        )
        await queues.set(name, *given)

    def queues(self) -> builtins.list[QueueInfo]:
        """Every queue of runs set or in use: its sizes, its runs in and waiting."""
        return self.driver.limits.queues.list()

    def limits(self) -> builtins.list[LimitInfo]:
        """Every limit set or in use (and each key of one in use), by name."""
        return self.driver.limits.list()
