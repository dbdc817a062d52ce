"""PLACEHOLDER: `fusee logs`, being written."""

from __future__ import annotations


def logs() -> None:
    """Not written yet."""
    raise NotImplementedError
