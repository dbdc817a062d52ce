"""Limits across a SIGKILL (issue 20, item 2): a real child process sets a limit with
`engine.limit` and dies by SIGKILL while one of its steps holds a permit. The next
life finds the limit's size as it was set, holds no permit of the dead process, and
every step of the limit gets its turn, the held one's included."""

from __future__ import annotations

from pathlib import Path

import orjson
from harness import Child, journal

from fusee_runtime.journal.records import R


def test_a_permit_held_at_a_kill_is_not_leaked_and_the_limit_survives(tmp_path: Path) -> None:
    home, ledger = tmp_path / "home", tmp_path / "ledger.jsonl"
    first = Child(home, ledger, script="limit_child.py", args=("hold",))
    first.read_until("LIMIT 2")
    first.read_until("INSIDE held")
    first.kill()
    assert [rec[1:3] for rec in journal(home) if rec[0] == R.LimitSet] == [["api", 2]]

    second = Child(home, ledger, script="limit_child.py", args=("after",))
    found = orjson.loads(second.read_until("FOUND ").removeprefix("FOUND "))
    assert found == [["api", 2, True, 1, 0]]  # its size as set; the one permit is held's
    assert second.read_until("SHARED ") == "SHARED 2 3"  # both permits can be taken
    outcome = second.finish()
    assert outcome == {"results": ["held", "r-0", "r-1", "r-2", "r-3"], "most": 2, "in_use": 0}
