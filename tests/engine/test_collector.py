"""The garbage collector's threshold while engines are open (`engine/collector.py`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusee_runtime import Config, Engine


@pytest.fixture(autouse=True)
def _threshold_kept() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


async def test_the_threshold_is_raised_while_engines_are_open_and_put_back_after_the_last(
    tmp_path: Path,
) -> None:
    async with Engine(tmp_path / "a", app=None, config=Config(gc_threshold=9000)):
        assert gc.get_threshold() == (9000, 10, 10)
        async with Engine(tmp_path / "b", app=None, config=Config(gc_threshold=9000)):
            assert gc.get_threshold() == (9000, 10, 10)
        assert gc.get_threshold() == (9000, 10, 10)  # one engine is still open
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_higher_threshold_is_never_lowered_and_none_leaves_it(tmp_path: Path) -> None:
    gc.set_threshold(50_000, 10, 10)
    async with Engine(tmp_path / "a", app=None, config=Config(gc_threshold=9000)):
        assert gc.get_threshold() == (50_000, 10, 10)
    gc.set_threshold(700, 10, 10)
    async with Engine(tmp_path / "b", app=None, config=Config(gc_threshold=None)):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_threshold_someone_set_meanwhile_is_kept_after_close(tmp_path: Path) -> None:
    async with Engine(tmp_path / "a", app=None, config=Config(gc_threshold=9000)):
        gc.set_threshold(1234, 5, 5)  # the application's own choice, while open
    assert gc.get_threshold() == (1234, 5, 5)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10000", True])
def test_a_threshold_that_is_not_a_whole_number_of_at_least_1_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="gc_threshold"):
        Config(gc_threshold=bad)  # type: ignore[arg-type]
