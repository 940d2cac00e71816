"""A tiny name → object registry (losses, algorithms, rewards, engines, tasks).

Registering a name twice is an error; a failed lookup lists the valid names. The variant choice in the
project is made once, at lookup, never by repeated ``if/elif`` on a string.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named mapping with a decorator for registration.

    >>> losses = Registry("loss")
    >>> @losses.register("double")
    ... def double(x): return 2 * x
    >>> losses.get("double")(3)
    6
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "(none)"
            raise KeyError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
