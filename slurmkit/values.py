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

:class:`Words` is the same for a ``(str, enum.Enum)`` vocabulary (a check's status, action,
tier): :mod:`enum` imports :mod:`functools` and :mod:`collections`, about 4 ms of CPU on
every job start here, for three classes of constant strings.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Optional

_INFINITIES = (float("inf"), float("-inf"))


def is_finite(number: float) -> bool:
    """``math.isfinite`` for the hooks' path, which does not import :mod:`math` (a shared
    library, loaded per process): neither NaN nor an infinity. An ``int`` is always finite
    (where ``math.isfinite`` raises ``OverflowError`` for one beyond a float's range)."""
    return number == number and number not in _INFINITIES


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


class LineDict(dict):
    """A dict that knows the source line of each of its keys (``lines``: key -> 1-based line)
    and its own (``line``): what :mod:`slurmkit.core.yamlload` builds for every mapping, so
    that an error names the file and the line. Here, not there, because the schema and the
    config test for it on every job start, which reads no YAML."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines: dict = {}
        self.line: Optional[int] = None


class _WordsType(type):
    """The class of a :class:`Words` vocabulary: makes each upper-case string attribute a member,
    looks a member up by its value (``Status("fail")``) and iterates the members in order."""

    def __new__(mcls, name: str, bases: tuple, namespace: dict):
        cls = super().__new__(mcls, name, bases, namespace)
        members = {}
        for key, value in namespace.items():
            if key.isupper() and not key.startswith("_") and isinstance(value, str):
                word = str.__new__(cls, value)
                word.__dict__["_name_"] = key
                members[value] = word
                type.__setattr__(cls, key, word)
        type.__setattr__(cls, "_members_", members)
        return cls

    def __call__(cls, value: object) -> "Words":
        try:
            return cls._members_[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None

    def __iter__(cls):
        return iter(list(cls._members_.values()))

    def __len__(cls) -> int:
        return len(cls._members_)

    def __setattr__(cls, name: str, value: object) -> None:
        raise AttributeError(f"cannot reassign {cls.__name__}.{name}: a vocabulary is fixed")


class Words(str, metaclass=_WordsType):
    """A fixed vocabulary of strings, used as ``class Status(str, enum.Enum)`` would be::

        class Status(Words):
            OK = "ok"
            FAIL = "fail"

    ``Status.FAIL`` is the one member for ``"fail"``: a ``str`` equal to ``"fail"`` (JSON writes
    it as that string), with ``.value`` (the plain string) and ``.name`` (``"FAIL"``);
    ``Status("fail")`` returns it and raises ``ValueError`` for any other value; iterating the
    class gives the members in the order written. ``str()``, ``format()`` and ``repr()`` read as
    an enum member's do on Python 3.11 (``Status.FAIL``, ``<Status.FAIL: 'fail'>``)."""

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self.__dict__["_name_"]

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {str.__repr__(self)}>"

    def __reduce__(self):
        return type(self), (self.value,)

    def __copy__(self) -> "Words":
        return self

    def __deepcopy__(self, memo: dict) -> "Words":
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to {name!r} of {self!r}")
