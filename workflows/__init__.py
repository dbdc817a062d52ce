"""Example workflows, and the CLI's default app (`--app workflows`).

Importing this package registers every example; copy one to start your own.
"""

from workflows import approval, flaky, order

__all__ = ["approval", "flaky", "order"]
