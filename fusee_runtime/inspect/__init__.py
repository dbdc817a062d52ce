"""What a home holds and whether it is damaged, read without touching it (`fusee check`)."""

from fusee_runtime.inspect.home import inspect_home
from fusee_runtime.inspect.reading import HomeUnreadable

__all__ = ["HomeUnreadable", "inspect_home"]
