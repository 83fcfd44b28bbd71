"""The op tables: every consumer of ops or layers (a front end, a back end, a writer, a peer)
keeps one :class:`Table` from a type to its entry for that type (a handler, a writer, a
record).

One lookup rule: a thing's type, else the nearest type in its MRO that has an entry (a back
end's prepared form of an IR op, es2's ``Gemv``, takes its ``ir.Dense`` entry; a subclass of
a Keras layer takes that layer's handler).  One error for a thing without an entry,
:class:`NotTaken`, naming the thing, its type and the consumer, and what the consumer takes:
``layer 'act' (Elu): not taken by the Keras front end; taken: ...``.  Every table registers
itself in :data:`TABLES` (``tests/test_architecture.py`` checks that each table of IR ops has
every IR op type).

:class:`LoweringError` lives here, below every table's module (:mod:`.lowering`, which keeps
a table of its own, re-exports it).
"""
from __future__ import annotations


class LoweringError(ValueError):
    """A model (Keras or ONNX) that cannot be turned into the IR; the message names the
    layer or node."""


class NotTaken(LoweringError):
    """An op or a layer that a consumer's table has no entry for; the message names it, the
    consumer and what it takes."""


class Table:
    """A consumer's entries by type.  ``consumer``: who it is, for the error (``"the ES 2.0
    back end"``); ``what``: what its things are called there (``"layer"``); ``taken``: what
    the error lists as taken (default: the names of the types with an entry)."""

    def __init__(self, consumer: str, what: str = "layer", taken=None):
        self.consumer, self.what, self._taken = consumer, what, taken
        self.entries: dict[type, object] = {}
        TABLES.append(self)

    def add(self, *types):
        """A decorator: ``entry`` is the entry of each of ``types``."""
        def add(entry):
            for kind in types:
                self.entries[kind] = entry
            return entry
        return add

    def key(self, kind: type) -> type | None:
        """The type whose entry ``kind`` takes: itself or the nearest in its MRO, or None."""
        return next((t for t in kind.__mro__ if t in self.entries), None)

    def get(self, kind: type):
        """The entry for the type ``kind`` (the lookup rule above), or None."""
        key = self.key(kind)
        return None if key is None else self.entries[key]

    def of(self, thing):
        """The entry for ``thing`` (an op or a layer: it has a ``name``); :class:`NotTaken`
        when there is none."""
        entry = self.get(type(thing))
        if entry is None:
            taken = self._taken or [t.__name__ for t in self.entries]
            raise NotTaken(f"{self.what} {thing.name!r} ({type(thing).__name__}): not taken by "
                           f"{self.consumer}; taken: {', '.join(taken)}")
        return entry


TABLES: list[Table] = []
