"""PLACEHOLDER: `fusee tail_stream`, being written."""

from __future__ import annotations


def tail_stream() -> None:
    """Not written yet."""
    raise NotImplementedError
