"""`nightly-report`: a cron schedule, fired every night by `fusee serve`.

    fusee serve &                                   # fires the schedules while it runs
    fusee schedules                                 # each schedule, paused or not, next firing
    fusee schedules trigger nightly-report          # a run now, whatever the time
    fusee schedules pause nightly-report            # durable: nights that pass are skipped

Each instant of the schedule starts a run whose id is the workflow's name
and the instant (`nightly-report@2026-12-04T02:00:00Z`) and whose input is
the instant, as ISO 8601 text, so a crash around a firing neither starts
it twice nor skips it. A night when nothing served the home is caught up
once, when a server next starts (`catchup="one"`); a run still open at the
next instant makes the schedule skip it (`overlap="skip"`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fusee_runtime import Ctx, step, workflow


@step
async def tally(day: str) -> dict[str, int]:
    """Counts the day's orders (a stand-in for a query to the order database)."""
    return {"orders": sum(map(ord, day)) % 40, "refunds": sum(map(ord, day)) % 3}


@workflow(name="nightly-report", cron="0 2 * * *", timezone="UTC")
async def nightly_report(ctx: Ctx, instant: str | None) -> dict[str, Any]:
    """Reports on the day before the instant it was fired for."""
    fired = datetime.fromisoformat(instant) if instant else ctx.now()
    day = (fired - timedelta(days=1)).date().isoformat()
    figures = await tally(day)
    ctx.log.info(f"{day}: {figures['orders']} orders, {figures['refunds']} refunds")
    return {"day": day, **figures}
