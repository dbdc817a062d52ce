"""Regenerates the shell completion scripts in `completions/` from the CLI.

    python -m fusee_cli.completions           # rewrite them
    python -m fusee_cli.completions --check   # exit 1 if one is stale

Each script is exactly what the command prints for
`_FUSEE_COMPLETE=source_<shell> fusee` (typer's spelling of click's
`<shell>_source` instruction), so the files cannot drift from what the
installed command would hand a shell. A test runs `--check`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
DIRECTORY = Path(__file__).resolve().parent.parent / "completions"


def source(shell: str) -> str:
    """The completion script for `shell`, as the `fusee` command generates it."""
    env = {**os.environ, "_FUSEE_COMPLETE": f"source_{shell}"}
    done = subprocess.run(
        [sys.executable, "-m", "fusee_cli"], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def path(shell: str, directory: Path = DIRECTORY) -> Path:
    return directory / f"fusee.{shell}"


def stale(directory: Path = DIRECTORY) -> list[Path]:
    """The scripts in `directory` that differ from what the CLI generates now."""
    out = []
    for shell in SHELLS:
        p = path(shell, directory)
        if not p.is_file() or p.read_text() != source(shell):
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusee_cli.completions", description=__doc__)
    parser.add_argument("--check", action="store_true", help="report stale scripts, change none")
    parser.add_argument("--dir", type=Path, default=DIRECTORY, help="where the scripts live")
    args = parser.parse_args(argv)
    if args.check:
        old = stale(args.dir)
        for p in old:
            print(f"stale: {p} (run python -m fusee_cli.completions)", file=sys.stderr)
        return 1 if old else 0
    args.dir.mkdir(parents=True, exist_ok=True)
    for shell in SHELLS:
        path(shell, args.dir).write_text(source(shell))
        print(path(shell, args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
