"""PLACEHOLDER: `fusee complete`, `fusee fail`, being written."""

from __future__ import annotations


def complete() -> None:
    """Not written yet."""
    raise NotImplementedError


def fail() -> None:
    """Not written yet."""
    raise NotImplementedError
