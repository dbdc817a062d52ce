"""PLACEHOLDER: `fusee check`, being written."""

from __future__ import annotations


def check() -> None:
    """Not written yet."""
    raise NotImplementedError
