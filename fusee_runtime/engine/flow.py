"""The engine's flow control, as `Engine` offers it: the sizes of the named limits
(`limit=`, how many attempts at once) and of the rates over time (`rate=`, how many
attempts start in a window), and what each is doing now. The work is `Limits`'
(`engine/limits.py`) and `Rates`' (`engine/rates.py`)."""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import TYPE_CHECKING

from fusee_runtime.dsl import Rate
from fusee_runtime.engine.limits import LimitInfo
from fusee_runtime.engine.rates import RateInfo
from fusee_runtime.errors import Rejected

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver


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

    def limits(self) -> builtins.list[LimitInfo]:
        """Every limit set or in use (and each key of one in use), by name."""
        return self.driver.limits.list()
