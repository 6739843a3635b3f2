"""``value_methods``: a dataclass's ``__eq__``, ``__hash__`` and ``__repr__``, shared instead of generated.

``@dataclass`` writes each of these methods as source text and compiles it when the class is created,
that is when its module is imported; ``gpu-fit`` imports about twenty dataclasses on every run, and
compiling their comparison, hash and repr methods cost about 2% of its instructions. The functions here
behave exactly as the generated ones (``tests/test_values.py`` checks them against dataclass's own on
every class that uses them) and are built once per class from its fields, without compiling anything.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these attributes (``attrgetter`` returns a bare value for one name)."""
    if len(names) == 1:
        get = operator.attrgetter(names[0])
        return lambda obj: (get(obj),)
    if not names:
        return lambda obj: ()
    return operator.attrgetter(*names)


def value_methods(cls: type[_T]) -> type[_T]:
    """Give a dataclass declared with ``eq=False, repr=False`` the ``__eq__``, ``__hash__`` and
    ``__repr__`` that ``@dataclass`` (``eq=True, repr=True``) would have generated for it:

    - ``__eq__`` compares the tuple of the fields with ``compare=True``, same class only (else
      ``NotImplemented``);
    - ``__hash__`` hashes the tuple of the fields that take part in the hash, for a frozen class;
      a mutable class is unhashable (``__hash__ = None``), as dataclass makes it;
    - ``__repr__`` is ``Name(field=value!r, …)`` over the fields with ``repr=True``, guarded against
      recursion as dataclass guards it.

    Apply it above the ``@dataclass`` decorator. A class that sets ``order``, ``unsafe_hash``, or
    defines any of these methods itself is refused: dataclass would treat those differently."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if params.eq or params.repr or params.order or params.unsafe_hash:
        raise TypeError(f"{cls.__qualname__}: value_methods needs @dataclass(eq=False, repr=False), no order")
    for name in ("__eq__", "__hash__", "__repr__"):
        if name in cls.__dict__ and not (name == "__hash__" and cls.__dict__[name] is None):
            raise TypeError(f"{cls.__qualname__} defines {name} itself")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    compared = _getter(tuple(f.name for f in fields if f.compare))
    hashed = _getter(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    shown = tuple(f.name for f in fields if f.repr)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(compared(self) == compared(other))
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"

    for method in (__eq__, __hash__, __repr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    cls.__eq__ = __eq__  # type: ignore[method-assign]
    cls.__repr__ = __repr__  # type: ignore[method-assign]
    setattr(cls, "__hash__", __hash__ if params.frozen else None)  # noqa: B010 (None is not a method)
    return cls
