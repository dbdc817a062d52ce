"""A run's status (`Status`): the one word `RunInfo`, `fusee list` and the history
store say of where a run is.

Part of `fusee_runtime.model`, the engine's vocabulary: it imports nothing.
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """A run's status; the values are the lowercase names."""

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    PARKED = "parked"
    PAUSED = "paused"
    STUCK = "stuck"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    TERMINATED = "terminated"
    CONTINUED_AS_NEW = "continued_as_new"
    RESET = "reset"

    @property
    def is_open(self) -> bool:
        return self in (
            Status.SCHEDULED,
            Status.QUEUED,
            Status.RUNNING,
            Status.PARKED,
            Status.PAUSED,
            Status.STUCK,
        )
