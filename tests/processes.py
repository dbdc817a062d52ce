"""What the tests that run `fusee` as a child process share."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest


def fusee_script() -> str:
    """The installed `fusee` console script: beside this interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("fusee")
    found = str(beside) if beside.exists() else shutil.which("fusee")
    if found is None:
        pytest.fail("the `fusee` console script is not installed: pip install -e .")
    return found


REPO = Path(__file__).resolve().parents[1]


def serve_http(
    home: Path, app_dir: Path, app: str, *args: str
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Starts `fusee serve --http 127.0.0.1:0 ARGS` on `home` with the workflow module
    `app` from `app_dir`; returns the child and its `serving` event once it serves.

    Raises:
        RuntimeError: the child exited before serving (with its stderr).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    # This checkout, whatever the installed package points at.
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(app_dir), str(REPO), env.get("PYTHONPATH")])
    )
    command = [fusee_script(), "serve", "--home", str(home), "--app", app]
    child = subprocess.Popen(
        [*command, "--http", "127.0.0.1:0", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        _, err = child.communicate()
        raise RuntimeError(f"fusee serve exited {child.returncode} before serving:\n{err}")
    serving = orjson.loads(line)
    assert serving["event"] == "serving", serving
    return child, serving


def stop_child(child: subprocess.Popen[str]) -> None:
    """Stops a `fusee serve` child (SIGTERM: it stops cleanly), killing it if it hangs."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # not an assertion: a stuck child must not hang pytest
        child.kill()
        child.communicate()
