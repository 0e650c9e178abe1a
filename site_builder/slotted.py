"""Quick unpickling for the slotted, frozen data classes a build keeps one of per record.

Slots save each object its instance dict (~100-250 bytes, so tens of MB at 100,000 records), but a frozen
slotted dataclass unpickles through ``dataclasses``' own ``__setstate__``, which looks up ``fields()`` and calls
``object.__setattr__`` for every field of every object: loading a 10,000-record build memory took ~70 ms
longer than with instance dicts.  This ``__setstate__`` sets the slots through their descriptors directly.
"""

from __future__ import annotations

from dataclasses import fields


def quick_unpickle(cls: type) -> type:
    """Give the frozen slotted dataclass *cls* a ``__setstate__`` for the state its ``__getstate__`` makes
    (the field values in order)."""
    setters = tuple(getattr(cls, f.name).__set__ for f in fields(cls))

    def __setstate__(self, state) -> None:
        for set_slot, value in zip(setters, state):
            set_slot(self, value)

    cls.__setstate__ = __setstate__
    return cls
