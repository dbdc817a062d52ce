"""`fusee serve` when its journal fails: it stops and exits 1 (fail-stop), so a
supervisor sees it, rather than serving on while refusing every call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from damage import FailingSync

from fusee_cli import serving, session
from fusee_cli.commands import serve
from fusee_cli.session import CliError, Code
from fusee_runtime import Ctx, JournalFailed, workflow
from fusee_runtime.control.client import ControlClient


class Events(serving.Output):
    """The server's events, kept; `serving` is awaitable."""

    def __init__(self) -> None:
        super().__init__(tty=False, every=3600)
        self.names: list[str] = []
        self.serving = asyncio.Event()

    def event(self, name: str, **fields: Any) -> None:
        self.names.append(name)
        if name == "serving":
            self.serving.set()


@workflow(name="serve_failure.noop")
async def noop(ctx: Ctx, _: None) -> None:
    return None


async def test_a_failed_fdatasync_stops_the_server_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FailingSync()
    opened = session.open_engine

    def on_the_failing_disk(*args: Any, **config: Any) -> Any:
        return opened(*args, storage=disk, **config)

    monkeypatch.setattr(session, "open_engine", on_the_failing_disk)
    home = tmp_path / "home"
    out = Events()
    app: Any = None  # the workflow is registered by this module already
    serving = serve._serve(home, app, None, None, False, 10.0, out, None)
    served = asyncio.ensure_future(serving)
    await out.serving.wait()
    client = await ControlClient.connect(home)
    assert client is not None
    disk.broken.set()
    with pytest.raises(JournalFailed):  # never acknowledged
        await client.start("serve_failure.noop", None, id="f-1")
    with pytest.raises(CliError) as failed:
        await served
    assert failed.value.code == Code.FAILED
    assert "stopped accepting work after a failed write or fdatasync" in failed.value.message
    assert out.names[-1] == "failed"
