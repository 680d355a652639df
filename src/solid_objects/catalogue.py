"""Every actor class defined in this process, by ``actor_type``.

``Actor.__init_subclass__`` adds each subclass here, so a runtime that does
not restrict its types (``Runtime(url)`` without ``actors=[...]``) serves every
actor class its process defines or imports, with no second list to keep in
sync: the module ``solid-objects worker app.actors:runtime`` loads is the list.
A class defined with ``auto_register=False`` is left out (the doctor's probe).

Classes are held weakly, so classes made and dropped at run time (in tests, in
a function) do not accumulate. A class defined again under the same module and
qualified name (a reload, a notebook cell run twice, a test's local class)
replaces the earlier one; two *different* classes claiming one ``actor_type``
are ambiguous, and no runtime serves that type implicitly until one is
registered explicitly (``runtime.register(cls)``, ``runtime.ref(cls, ...)``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any


def _name(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class Catalogue:
    def __init__(self) -> None:
        self._lock = threading.RLock()  # a class collected mid-add calls _forget
        self._classes: dict[str, list[weakref.ref[type[Any]]]] = {}
        #: Bumped on every change, so readers can cache what they derive from it.
        self.version = 0
        self._cache: tuple[int, dict[str, type[Any]], dict[str, list[str]]] | None = None

    def add(self, cls: type[Any]) -> None:
        actor_type = str(cls.actor_type)
        with self._lock:
            kept = [
                r
                for r in self._classes.get(actor_type, [])
                if (c := r()) is not None and c is not cls and _name(c) != _name(cls)
            ]
            kept.append(weakref.ref(cls, self._forget))
            self._classes[actor_type] = kept
            self.version += 1

    def _forget(self, _: weakref.ref[type[Any]]) -> None:
        with self._lock:
            self.version += 1

    def resolve(self) -> tuple[dict[str, type[Any]], dict[str, list[str]]]:
        """(the class of each unambiguous type, the class names of each ambiguous one)."""
        with self._lock:
            if self._cache is not None and self._cache[0] == self.version:
                return self._cache[1], self._cache[2]
            unique: dict[str, type[Any]] = {}
            ambiguous: dict[str, list[str]] = {}
            for actor_type, refs in list(self._classes.items()):
                live = [c for r in refs if (c := r()) is not None]
                if not live:
                    del self._classes[actor_type]
                elif len(live) == 1:
                    unique[actor_type] = live[0]
                else:
                    ambiguous[actor_type] = sorted(_name(c) for c in live)
            self._cache = (self.version, unique, ambiguous)
            return unique, ambiguous


#: The process-wide catalogue ``Actor`` subclasses join when they are defined.
CATALOGUE = Catalogue()
