"""The run log: `ctx.log` lines, written by the owner to `<home>/logs/`.

PLACEHOLDER: filled in by the run-log work (JSON lines, rotated, followable
with `fusee logs -f`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusee_runtime.context import Ctx
    from fusee_runtime.engine.state import Run


class RunLog:
    """The home's log file; one per open engine that drives runs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def logger(self, ctx: Ctx) -> Any:
        """The `ctx.log` of one run."""
        raise NotImplementedError

    def closed(self, run: Run) -> None:
        """Called once a run's close is durable."""

    def close(self) -> None:
        """Called when the engine closes."""
