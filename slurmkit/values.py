"""Small value classes without :mod:`dataclasses`: equality, ``repr`` and, for frozen ones,
immutability and a hash, from the fields the class annotates.

The hooks import the classes that carry a check's result, the job environment, a check's
declaration and the GPU backend's answers on every job start. ``dataclasses`` pulls in
``inspect`` (and with it ``ast``, ``dis``, ``tokenize``) and generates each class's methods
with ``exec`` when the class is defined; on the prolog's path that was about a fifth of the
whole process (docs/benchmarks.md, "Prolog fast path"). A class here annotates its fields
once, in order, writes its own ``__init__`` (with the defaults), and inherits the rest::

    class Sample(Value):
        name: str
        value: float

        def __init__(self, name: str, value: float = 0.0) -> None:
            self.name = name
            self.value = value

Two values are equal when they are of the same class and every field is equal (what a
dataclass compares); a mutable value has no hash, as a dataclass with ``eq=True``. A
:class:`FrozenValue` sets its fields with :meth:`FrozenValue._set` and refuses any later
assignment (``AttributeError``), and hashes its fields.
"""

from __future__ import annotations


class Value:
    """Base of a mutable value class: ``_fields`` is the class's annotated names, in order."""

    _fields: tuple = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        own = tuple(cls.__dict__.get("__annotations__", {}))
        inherited = tuple(f for base in cls.__mro__[1:] for f in getattr(base, "_fields", ()))
        cls._fields = tuple(dict.fromkeys(inherited + own))

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable: like a dataclass with eq=True

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__qualname__}({inner})"


class FrozenValue(Value):
    """A value that cannot change after ``__init__`` (which sets fields with :meth:`_set`)."""

    def _set(self, **fields) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def __hash__(self) -> int:
        return hash(self._values())
