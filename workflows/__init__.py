"""Example workflows, and the CLI's default app (`--app workflows`).

Importing this package registers every example; copy one to start your own.
It is not installed with fusee: `fusee` imports it from the current directory,
so run the examples from the checkout's root.
"""

from workflows import approval, digest, expenses, flaky, order, parcels, report, review

__all__ = [
    "approval",
    "digest",
    "expenses",
    "flaky",
    "order",
    "parcels",
    "report",
    "review",
]
