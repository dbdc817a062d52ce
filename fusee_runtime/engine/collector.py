"""The cyclic garbage collector while engines are open.

An engine holds many long-lived objects (its open runs, their operations and
records) and makes a few more with every step. With CPython's default first
threshold (700 allocations) the collector runs a young collection every
hundred-odd steps and a full one, over everything the engine holds, every few
thousand: a fifth of the CPU of 1,000 concurrent runs went there (`fusee bench`,
2026-12-07). While at least one engine of the process is open, the first
threshold is raised to `Config.gc_threshold` (never lowered); when the last
one closes it goes back to what it was, unless someone changed it meanwhile.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_open = 0
_before: tuple[int, int, int] | None = None
_set: tuple[int, int, int] | None = None


def engine_opened(threshold: int | None) -> None:
    """An engine opened: raises the first threshold to `threshold` (None: leaves it)."""
    global _open, _before, _set
    with _lock:
        _open += 1
        now = gc.get_threshold()
        if threshold is None or now[0] >= threshold or now[0] == 0:  # (0: collector off)
            return
        if _before is None:
            _before = now
        _set = (threshold, now[1], now[2])
        gc.set_threshold(*_set)


def engine_closed() -> None:
    """An engine closed: the last one puts the threshold back, if it is still ours."""
    global _open, _before, _set
    with _lock:
        _open = max(0, _open - 1)
        if _open or _before is None:
            return
        if gc.get_threshold() == _set:
            gc.set_threshold(*_before)
        _before = _set = None


@contextmanager
def held_off() -> Iterator[None]:
    """The collector held off while an engine reads its journal and rebuilds memory
    (`Engine.open`): both allocate objects that all survive (the records read, the
    runs, their records and operations) and free nothing cyclic, so each pass it made
    over them as they grew walked all of them again, for nothing (a fifth to two fifths
    of a crash open's time, issue 41). It runs again afterwards, if it ran before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
