"""JSON values, typed: what the engine, the stores and the control surface pass as JSON.

`Json` is any JSON value (recursive); `JsonObject` an object. A value of the user's
that has not been encoded yet is not `Json` but `object` (or the type the workflow
annotated): it becomes JSON only through `fusee_runtime.typed`.

Part of `fusee_runtime.model`: it imports nothing of the engine, the journal or the
control surface.
"""

from __future__ import annotations

from typing import TypeAlias

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
"""A JSON value, as orjson reads it back."""
JsonObject: TypeAlias = "dict[str, Json]"
"""A JSON object."""
