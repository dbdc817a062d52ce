#!/usr/bin/env python3
"""`fusee bench` on two checkouts of fusee, in alternating pairs, in one sitting.

A change to the hot path is measured before and after on the same machine,
minutes apart, so that the machine's drift (another tenant, a warm or cold
disk) falls on both sides alike: pair k runs `before`, then `after` (odd pairs
the other way round), each in a fresh process with `PYTHONPATH` set to its
checkout, and prints each pair's figures and the median of each side.

    python benchmarks/bench_pairs.py --before ../base --after . --pairs 5
    python benchmarks/bench_pairs.py --before ../base --after . -- --storage --runs 20000
    python benchmarks/bench_pairs.py --before ../base --after . -- --store postgresql://...

Arguments after `--` go to `fusee bench` (`--json` is always given). `--out
FILE` keeps every run's JSON, one line each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def flat(report: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The report's numbers, by their dotted path (`seq_step_us.per_step`)."""
    out: dict[str, float] = {}
    for key, value in report.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{path}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[path] = float(value)
    return out


def bench(checkout: Path, args: list[str], scratch: Path) -> dict[str, float]:
    """One `fusee bench --json` with `checkout`'s fusee, in a fresh home."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=scratch))
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fusee_cli", "bench", "--json", "--home", str(home), *args],
            env=env,
            cwd=checkout,  # (`-m` puts the working directory first on the path)
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"fusee bench with {checkout} exited {done.returncode}: {done.stderr}")
    return flat(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout measured first")
    parser.add_argument("--after", type=Path, required=True, help="checkout with the change")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--out", type=Path, help="every run's figures, one JSON line each")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then fusee bench's options")
    ns = parser.parse_args()
    args = ns.rest[1:] if ns.rest[:1] == ["--"] else ns.rest
    sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    scratch = Path(tempfile.mkdtemp(prefix="bench-pairs-"))
    try:
        for k in range(ns.pairs):
            order = ("before", "after") if k % 2 == 0 else ("after", "before")
            for side in order:
                figures = bench(getattr(ns, side), args, scratch)
                sides[side].append(figures)
                if ns.out is not None:
                    with ns.out.open("a") as f:
                        f.write(json.dumps({"pair": k, "side": side, **figures}) + "\n")
            print(f"pair {k + 1} of {ns.pairs} done", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    keys = [key for key in sides["before"][0] if all(key in r for r in sides["after"])]
    width = max(map(len, keys))
    print(f"{'figure':<{width}}  {'before (median)':>16}  {'after (median)':>15}  pairs")
    for key in keys:
        before = [r[key] for r in sides["before"]]
        after = [r[key] for r in sides["after"]]
        each = " ".join(f"{b:g}/{a:g}" for b, a in zip(before, after, strict=True))
        print(
            f"{key:<{width}}  {statistics.median(before):>16g}  "
            f"{statistics.median(after):>15g}  {each}"
        )


if __name__ == "__main__":
    main()
