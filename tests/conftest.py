"""Fixtures shared by every test directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusee_runtime import Config, Engine, FakeClock


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty fusee home on a real disk."""
    return tmp_path / "home"


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test moves it."""
    return FakeClock()


@pytest.fixture
def make_engine(home: Path, clock: FakeClock):
    """Builds an engine on the test's home and fake clock; small segments by default."""

    def make(**config: object) -> Engine:
        config.setdefault("clock", clock)
        config.setdefault("segment_bytes", 8 << 20)
        return Engine(home, app=None, config=Config(**config))  # type: ignore[arg-type]

    return make
