"""fusee's pytest plugin (entry point `pytest11`): the `fusee_env` fixture.

Installing fusee is enough to have it. It costs nothing until a test asks
for the fixture: the engine is imported then (`fusee_runtime.testing`).
The fixture is async, so it needs pytest-asyncio; without it, a test says
so in one line, and `async with Env(tmp_path) as env:` works in any async
test runner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fusee_runtime.testing import Env

try:
    import pytest_asyncio

    HAS_ASYNCIO = True
except ImportError:  # pragma: no cover - depends on what the user installed
    HAS_ASYNCIO = False


if HAS_ASYNCIO:

    @pytest_asyncio.fixture
    async def fusee_env(tmp_path: Path) -> AsyncIterator[Env]:
        """An open `fusee_runtime.testing.Env` on a home in the test's `tmp_path`: a real
        engine on a fake clock, for the workflows the test imported; closed after."""
        from fusee_runtime.testing import Env

        async with Env(tmp_path / "fusee-home") as env:
            yield env

else:  # pragma: no cover

    @pytest.fixture
    def fusee_env() -> Any:
        """Needs pytest-asyncio."""
        pytest.fail(
            "the fusee_env fixture is async: pip install pytest-asyncio, or use "
            "`async with fusee_runtime.testing.Env(tmp_path) as env:` in the test",
            pytrace=False,
        )
