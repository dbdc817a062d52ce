"""Streams: items a run appends (`ctx.stream(name)`), read by `handle.stream(name)`.

PLACEHOLDER: filled in by the streams work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusee_runtime.context import Ctx


class StreamWriter:
    """Appends items to one stream of a run."""

    def __init__(self, ctx: Ctx, name: str) -> None:
        self._ctx = ctx
        self.name = name

    def append(self, item: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
