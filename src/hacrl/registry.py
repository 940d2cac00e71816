"""A tiny name → object registry (losses, algorithms, rewards, engines, tasks).

Registering a name twice is an error; a failed lookup lists the valid names. The variant choice in the
project is made once, at lookup, never by repeated ``if/elif`` on a string.
"""

from __future__ import annotations

import re
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

    A family resolves a whole pattern of names, built on first lookup:

    >>> losses.add_family(r"times(?P<n>[1-9][0-9]*)", "times<N>", lambda n: lambda x: int(n) * x)
    >>> losses.get("times7")(3), "times7" in losses, "times0" in losses
    (21, True, False)

    A member built on lookup is cached but not listed, so the listing does not depend on what was looked up before:

    >>> losses.names(), losses.listing()
    (['double'], ['double', 'times<N>'])
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._built: dict[str, T] = {}  # family members, built on first lookup
        self._families: list[tuple[re.Pattern[str], str, Callable[..., T]]] = []

    def add_family(self, pattern: str, label: str, build: Callable[..., T]) -> None:
        """Names matching ``pattern`` (whole name) resolve to ``build(**named groups)``; ``label`` shows the
        family in listings (e.g. ``gspo-x<N>``)."""
        self._families.append((re.compile(pattern), label, build))

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
        if name in self._items:
            return self._items[name]
        if name not in self._built:
            built = self._build(name)
            if built is None:
                raise KeyError(f"unknown {self.kind} {name!r}; {self._suggestion(name)}valid: "
                               f"{', '.join(self.listing()) or '(none)'}")
            self._built[name] = built
        return self._built[name]

    def _suggestion(self, name: object) -> str:
        """``did you mean 'add2'? `` for a near miss of a registered name, else nothing.

        >>> r = Registry("task"); r.add("add2", 1); r.add("mul1x3", 2)
        >>> r._suggestion("ad2"), r._suggestion("chess")
        ("did you mean 'add2'? ", '')
        """
        import difflib

        close = difflib.get_close_matches(str(name), self.names(), n=1, cutoff=0.6)
        return f"did you mean {close[0]!r}? " if close else ""

    def _build(self, name: str) -> T | None:
        for pattern, _, build in self._families:
            match = pattern.fullmatch(name)
            if match:
                return build(**match.groupdict())
        return None

    def names(self) -> list[str]:
        """The registered names (never a family's members, looked up or not)."""
        return sorted(self._items)

    def listing(self) -> list[str]:
        """The registered names and the families' labels, for messages."""
        return self.names() + [label for _, label, _ in self._families]

    def __contains__(self, name: object) -> bool:
        return name in self._items or (isinstance(name, str) and any(p.fullmatch(name) for p, _, _ in self._families))

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
