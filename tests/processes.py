"""What the tests that run `fusee` as a child process share."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def fusee_script() -> str:
    """The installed `fusee` console script: beside this interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("fusee")
    found = str(beside) if beside.exists() else shutil.which("fusee")
    if found is None:
        pytest.fail("the `fusee` console script is not installed: pip install -e .")
    return found
