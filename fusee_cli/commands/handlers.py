"""PLACEHOLDER: `fusee query`, `fusee update`, being written."""

from __future__ import annotations


def query() -> None:
    """Not written yet."""
    raise NotImplementedError


def update() -> None:
    """Not written yet."""
    raise NotImplementedError
