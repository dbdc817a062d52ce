"""Virtual objects: durable state under a key, changed by its own handlers, one at a time.

    @object(name="cart")
    class Cart:
        def __init__(self) -> None:
            self.items: list[str] = []

        @handler
        async def add(self, ctx: Ctx, item: str) -> int:   # exclusive: one at a time per key
            self.items.append(item)
            return len(self.items)

        @handler(shared=True)
        def count(self, ctx: Ctx) -> int:                   # shared: reads, never waits
            return len(self.items)

A key of an object is a run of its own (id `object:<name>:<key>`, workflow
`fusee.object.<name>`), started by its first call. Its state is the instance's
attributes, rebuilt the way a run's state is: by replaying what its handlers did.

- An exclusive handler (`@handler`) is an update of that run: applied one at a time,
  in the order the calls were accepted, each recorded with its id and its result.
  It may be `async` and run steps, sleep and wait like workflow code.
- A shared handler (`@handler(shared=True)`) is a query of that run: a plain `def`
  that reads the state (and must not change it), answered at once, also while an
  exclusive handler is running (it then sees the state as that handler left it so
  far).
- From a workflow, `await ctx.object("cart", key).call("add", item)` is one
  operation of the caller, recorded: a step whose function sends the call with the
  step's idempotency key (`ctx.key()`) as the update id. A step run again after a
  crash of the caller sends the same id, and the object answers with the outcome it
  recorded the first time: each call reaches the object exactly once.
- From outside: `engine.object("cart", key).call("add", item)` and `.get()` (the
  state), `.query("count")`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from fusee_runtime.errors import NotFound

OBJECT_PREFIX = "fusee.object."
"""The workflow name of an object's runs: `fusee.object.<name>`."""
STATE = "fusee.state"
"""The query that answers an object's state."""

T = TypeVar("T")


@dataclass(frozen=True)
class Handler:
    """One handler of an object: its name, function, and whether it is shared."""

    name: str
    fn: Callable[..., Any]
    shared: bool
    takes_arg: bool


@dataclass
class ObjectDef:
    """A registered `@object` class."""

    name: str
    cls: type
    handlers: dict[str, Handler] = field(default_factory=dict)

    @property
    def workflow(self) -> str:
        return OBJECT_PREFIX + self.name


_registry: dict[str, ObjectDef] = {}


def registry() -> dict[str, ObjectDef]:
    """The objects registered in this process, by name."""
    return _registry


def object_id(name: str, key: str) -> str:
    """The id of the run that holds key `key` of object `name`.

    Raises:
        NotFound: `name` has a ':' or '#', as no object's name has.
    """
    if ":" in name or "#" in name:
        raise NotFound(f"no object {name!r}: an object's name has no ':' or '#'")
    return f"object:{name}:{key}"


def object_key(id: str) -> tuple[str, str] | None:
    """`(name, key)` of an object's run id (`object_id`'s inverse), or None for another id."""
    kind, _, rest = id.partition(":")
    name, sep, key = rest.partition(":")
    return (name, key) if kind == "object" and sep and name else None


@overload
def handler(fn: Callable[..., T], /) -> Callable[..., T]: ...
@overload
def handler(*, shared: bool = False) -> Callable[[Callable[..., T]], Callable[..., T]]: ...


def handler(fn: Callable[..., Any] | None = None, /, *, shared: bool = False) -> Any:
    """Marks a method of an `@object` class as a handler: `(self, ctx)` or
    `(self, ctx, arg)`. Exclusive unless `shared=True` (a plain `def` that only reads)."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        if shared and inspect.iscoroutinefunction(f):
            raise TypeError(f"@handler(shared=True) {f.__qualname__} is a plain def: it reads")
        f.__fusee_handler__ = shared  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def object(cls: type | None = None, /, *, name: str | None = None) -> Any:
    """Registers a class as a virtual object (see the module); the name defaults to the
    class's. Its `__init__` takes no argument and sets the state a new key begins with."""

    def register(c: type) -> type:
        obj = ObjectDef(name or c.__name__, c)
        if not obj.name or any(c in obj.name for c in ":#/") or not obj.name.isprintable():
            raise TypeError(f"@object name {obj.name!r}: give one without ':', '#' or '/'")
        for attr, fn in vars(c).items():
            if not callable(fn) or not hasattr(fn, "__fusee_handler__"):
                continue
            params = list(inspect.signature(fn).parameters.values())
            if len(params) not in (2, 3):
                raise TypeError(
                    f"@handler {c.__name__}.{attr} takes (self, ctx) or (self, ctx, arg)"
                )
            obj.handlers[attr] = Handler(attr, fn, fn.__fusee_handler__, len(params) == 3)
        if not obj.handlers:
            raise TypeError(f"@object {c.__name__} has no @handler method")
        _registry[obj.name] = obj
        c.__fusee_object__ = obj  # type: ignore[attr-defined]
        return c

    return register(cls) if cls is not None else register
