"""A SIGKILL of the process that fires a schedule never fires an instant twice, nor skips it.

The child (cron_child.py) fires "cron.tick" every minute of a fake clock
that the test moves. It is killed right after a firing, either before its
records can be known durable or after; the next life opens the home at the
same instant and then fires on. The journal must hold exactly one run per
instant, and the firing of each instant recorded once as started.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest
from harness import HERE, journal

from fusee_runtime.engine.schedules import instant_id
from fusee_runtime.journal.records import R

T0 = 1_700_000_000.0  # 22:13:20 UTC
T = [1_700_000_040.0 + 60 * k for k in range(4)]  # 22:14:00, 22:15:00, ...


class Life:
    def __init__(self, home: Path, start: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "cron_child.py"), str(home), str(start)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.expect("SERVING") == ""

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().rstrip("\n")
        assert line.startswith(word), (word, line)
        return line.removeprefix(word).strip()

    def fire(self, at: float) -> None:
        self.send(f"set {at}")
        assert self.expect("STARTED") == instant_id("cron.tick", at)

    def synced(self) -> list[str]:
        self.send("sync")
        return orjson.loads(self.expect("SYNCED"))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.proc.returncode == -signal.SIGKILL
        for f in (self.proc.stdin, self.proc.stdout):
            assert f is not None
            f.close()


@pytest.mark.parametrize("when", ["at-once", "once-durable"])
def test_a_kill_right_after_a_firing_neither_repeats_nor_skips_it(
    tmp_path: Path, when: str
) -> None:
    home = tmp_path / "home"
    first = Life(home, T0)
    first.fire(T[0])
    assert first.synced() == [instant_id("cron.tick", T[0])]
    first.fire(T[1])
    if when == "once-durable":
        first.synced()
    first.kill()

    second = Life(home, T[1])  # back at the instant of the last firing
    expected = [instant_id("cron.tick", t) for t in T[:2]]
    assert second.synced() == expected
    second.fire(T[2])
    assert second.synced() == [*expected, instant_id("cron.tick", T[2])]
    second.kill()

    recs = journal(home)
    started = Counter(r[2] for r in recs if r[0] == R.RunStarted)
    assert started == Counter(instant_id("cron.tick", t) for t in T[:3])
    fired = Counter((r[2], r[3]) for r in recs if r[0] == R.ScheduleFired)
    assert fired == Counter((t, "started") for t in T[:3])
