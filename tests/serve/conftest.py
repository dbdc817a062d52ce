"""`fusee serve` as a real child process, and `fusee` commands beside it.

Each test writes its app module into its own directory, which the children
run in (and import from); the home is `home` there. The server's stdout is
not a terminal, so it prints JSON lines, which the test reads as events
instead of waiting on time.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from processes import fusee_script


class Served:
    """One `fusee serve` child; its stdout read as JSON events."""

    def __init__(self, workdir: Path, env: dict[str, str], *args: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.stderr = workdir / f"serve-{len(list(workdir.glob('serve-*.err')))}.err"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [fusee_script(), "serve", *args],
                cwd=workdir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )

    def until(self, event: str, **match: Any) -> dict[str, Any]:
        """The next event named `event` (whose fields include `match`), reading as needed."""
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            doc = orjson.loads(raw)
            self.events.append(doc)
            if doc["event"] == event and all(doc.get(k) == v for k, v in match.items()):
                return doc
        self.proc.wait()
        raise AssertionError(
            f"serve ended (exit {self.proc.returncode}) before {event!r} {match}; "
            f"events={self.events} stderr={self.stderr.read_text()}"
        )

    def log_until(self, fragment: str) -> dict[str, Any]:
        """The next `log` event whose message contains `fragment`."""
        while True:
            doc = self.until("log")
            if fragment in doc["message"]:
                return doc

    def stop(self, sig: int | None = signal.SIGTERM) -> int:
        """Sends `sig` (None: none; it is stopping already), reads the rest of its
        output, and returns its exit code."""
        if sig is not None:
            self.proc.send_signal(sig)
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.events.append(orjson.loads(raw))
        self.proc.stdout.close()
        return self.proc.wait()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def env(workdir: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir), clean.get("PYTHONPATH")]))
    return {**clean, "FUSEE_HOME": str(workdir / "home"), "FUSEE_APP": "servedapp"}


@pytest.fixture
def app_module(workdir: Path) -> Callable[[str], Path]:
    """Writes the app module `servedapp.py` with that source."""

    def write(source: str) -> Path:
        path = workdir / "servedapp.py"
        path.write_text(source)
        return path

    return write


@pytest.fixture
def serve(workdir: Path, env: dict[str, str]) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*args: str) -> Served:
        s = Served(workdir, env, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        if s.proc.stdout is not None:
            s.proc.stdout.close()


@pytest.fixture
def fusee(workdir: Path, env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs `fusee ARGS...` in the test's directory, on its home and app."""

    def run(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [fusee_script(), *args],
            cwd=workdir,
            env=env,
            input=input,
            capture_output=True,
            text=True,
        )

    return run
