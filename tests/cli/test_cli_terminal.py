"""What a person at a terminal sees of a follower whose owner is killed (issue 16, item 12).

The follower (`fusee start` of a run another process owns) shows a live
spinner line on its terminal. When the owner dies, the follower takes the
home over and says so; that line must stand on its own, not be written at
the end of the spinner line. The follower's stderr is a real
pseudo-terminal here, and `screen` replays what it wrote the way a
terminal would.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
from pathlib import Path

from processes import fusee_script

REPO = Path(__file__).resolve().parents[2]
_CONTROL = re.compile(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)")


def screen(raw: bytes) -> list[str]:
    """The lines a terminal shows after `raw`: carriage returns, line feeds, erasing
    a line and moving the cursor up are applied; colours and other escapes dropped."""
    lines, row, col = [""], 0, 0
    for token in _CONTROL.split(raw.decode("utf-8", "replace")):
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
        elif token.startswith("\x1b["):
            final, param = token[-1], token[2:-1]
            if final == "K":
                lines[row] = "" if param == "2" else lines[row][:col]
            elif final == "A":
                row = max(0, row - int(param or "1"))
        elif token:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token) :]
            col += len(token)
    return lines


def test_the_takeover_notice_stands_on_its_own_line_above_the_spinner(spawn, fusee, tmp_path):
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    owner = spawn("start", "approval", "--id", "ap-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started ap-1")
    assert owner.stderr.readline().startswith("ap-1: waiting for signal 'approve'")  # served

    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.pop("NO_COLOR", None)
    env.update(TERM="xterm", COLUMNS="200")
    leader, terminal = pty.openpty()
    follower = subprocess.Popen(
        [fusee_script(), "start", "approval", "--id", "ap-1", *on],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    raw = b""

    def read_until(text: bytes, after: int = 0) -> None:
        """Reads what the follower writes until `text` shows past byte `after`."""
        nonlocal raw
        while raw.find(text, after) < 0:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the follower has exited and closed the terminal
                chunk = b""
            assert chunk, raw
            raw += chunk

    notice = f"the process that owned the home (pid {owner.pid}) went away; following ap-1 on"
    try:
        read_until(b"waiting for signal 'approve'")  # the spinner line
        owner.send_signal(signal.SIGKILL)
        owner.communicate()
        read_until(notice.encode())
        # The spinner again, after the notice: on a line of its own, or over the notice?
        read_until(b"ap-1: ", after=raw.find(notice.encode()))
    finally:
        follower.kill()
        follower.communicate()
        os.close(leader)

    shown = screen(raw)
    assert notice in shown, shown  # a line of its own, nothing before it nor after it
    assert not [line for line in shown if "waiting for signal" in line and "went away" in line]
