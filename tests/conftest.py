"""Fixtures shared by every test directory (`tests/` is on sys.path: the helpers here,
postgres_server and processes, import by name)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Config, Engine, FakeClock
from fusee_runtime.journal.storage import Storage

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    # The examples in workflows/ are not installed: tests import them from the
    # checkout's root, as `fusee` finds them there (tests/examples).
    sys.path.append(ROOT)

# A home that group or others may write to is refused (issue 36): the directories tests
# make with a bare mkdir() must not be, whatever the developer's umask (002 on Fedora).
os.umask(0o022)


class HoldingStorage(Storage):
    """Storage whose writes, once armed, wait until the test releases them."""

    loop_safe = False  # a held write must not hold the loop that releases it

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        if self.armed.is_set():
            self.holding.set()
            self.release.wait()
        super().write(fd, offset, data)


@pytest.fixture
def holding_storage() -> HoldingStorage:
    """A real disk whose writes wait, once `armed` is set, until `release` is set."""
    return HoldingStorage()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty fusee home on a real disk."""
    return tmp_path / "home"


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test moves it."""
    return FakeClock()


@pytest.fixture
def make_engine(home: Path, clock: FakeClock, store: str | None):
    """Builds an engine on the test's home, store and fake clock; small segments by default."""

    def make(**config: object) -> Engine:
        config.setdefault("clock", clock)
        config.setdefault("segment_bytes", 8 << 20)
        config.setdefault("store", store)
        return Engine(home, app=None, config=Config(**config))  # type: ignore[arg-type]

    return make


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module that sets `STORES = ("local", "postgresql")` runs each of its tests that
    uses the `store` fixture (`make_engine` does) once on each store."""
    stores = getattr(metafunc.module, "STORES", None)
    if stores and "store" in metafunc.fixturenames:
        metafunc.parametrize("store", stores, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str | None:
    """Where the test's engines keep their journal: None (the local journal), or the URL
    of a new database on the test session's PostgreSQL server."""
    if getattr(request, "param", "local") == "local":
        return None
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A real PostgreSQL server for this test process (started on first use)."""
    import postgres_server

    postgres_server.require()
    bindir = postgres_server.binaries()
    assert bindir is not None
    server = postgres_server.Server(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: Any) -> str:
    """A new, empty database on the session's PostgreSQL server."""
    return str(pg_server.database())


@pytest.fixture
def run_clock(clock: FakeClock) -> Callable[[Awaitable[Any]], Awaitable[Any]]:
    """Awaits something while moving the fake clock to each deadline the engine sleeps on.

    It only moves time when the engine is parked on the clock, so it waits
    on the engine's progress, never on real time.
    """

    async def run(awaitable: Awaitable[Any]) -> Any:
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                sleeper = asyncio.ensure_future(clock.wait_for_sleepers())
                try:
                    done, _ = await asyncio.wait(
                        {task, sleeper}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    sleeper.cancel()
                if task in done:
                    return task.result()
                deadline = clock.next_deadline()
                if deadline is not None:
                    clock.set(deadline)
        finally:
            if not task.done():
                task.cancel()

    return run


@pytest.fixture
def records() -> Callable[[Engine, str, str], Awaitable[list[dict[str, Any]]]]:
    """The history records of one type of the runs of an id."""

    async def of(engine: Engine, id: str, kind: str) -> list[dict[str, Any]]:
        return [r for r in await engine.history(id) if r["type"] == kind]

    return of
