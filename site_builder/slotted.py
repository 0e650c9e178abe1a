"""Quick pickling for the slotted, frozen data classes a build keeps one of per record.

Slots save each object its instance dict (~100-250 bytes, so tens of MB at 100,000 records), but a frozen
slotted dataclass pickles and unpickles through ``dataclasses``' own ``__getstate__`` and ``__setstate__``,
which look up ``fields()`` for every object (and the latter calls ``object.__setattr__`` for every field):
handing a record to a render worker and back (its result: ~18 such objects) took ~50 µs of the main process's
time.  These read the slots through one ``operator.attrgetter`` and set them through their descriptors
directly.  (Only objects crossing between the build's own processes are pickled; nothing is read from disk.)
"""

from __future__ import annotations

import operator
from dataclasses import fields
from typing import Callable


def quick_pickling(cls: type) -> type:
    """Give the frozen slotted dataclass *cls* a ``__getstate__`` (its field values in order, as a tuple) and the
    ``__setstate__`` that reads it back."""
    names = tuple(f.name for f in fields(cls))
    setters = tuple(getattr(cls, name).__set__ for name in names)
    values = operator.attrgetter(*names)

    if len(names) == 1:
        def __getstate__(self) -> tuple:
            return (values(self),)
    else:
        def __getstate__(self) -> tuple:
            return values(self)

    cls.__getstate__ = __getstate__
    cls.__setstate__ = _unrolled_setstate(setters)
    return cls


def _unrolled_setstate(setters: tuple) -> Callable[[object, tuple], None]:
    """``__setstate__`` that calls each slot's descriptor with its value.  A state of the wrong length raises
    ValueError."""
    count = len(setters)

    def __setstate__(self, state: tuple) -> None:
        if len(state) != count:
            raise ValueError(f"expected {count} values, got {len(state)}")
        for setter, value in zip(setters, state):
            setter(self, value)
    return __setstate__
