"""The examples are not installed: they import from the checkout's root, as `fusee`
finds them from there (a project of your own would set pytest's `pythonpath`)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
