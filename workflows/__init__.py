"""Example workflows, and the CLI's default app (`--app workflows`).

Importing this package registers every example; copy one to start your own.
"""

from workflows import approval, digest, flaky, order, review

__all__ = ["approval", "digest", "flaky", "order", "review"]
