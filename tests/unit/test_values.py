"""slurmkit.values: the dataclass semantics the hooks' value classes keep without dataclasses."""

from __future__ import annotations

import pytest

from slurmkit.health.declare import CheckSpec
from slurmkit.slurm.jobenv import JobEnv
from slurmkit.values import FrozenValue, Value
from slurmkit.verdict.base import CheckResult, Status, Tier


class Point(Value):
    x: int
    y: int

    def __init__(self, x: int, y: int = 0) -> None:
        self.x = x
        self.y = y


class Pin(FrozenValue):
    name: str
    where: Point

    def __init__(self, name: str, where: Point) -> None:
        self._set(name=name, where=where)


class Point3(Point):
    z: int

    def __init__(self, x: int, y: int = 0, z: int = 0) -> None:
        super().__init__(x, y)
        self.z = z


def test_fields_equality_and_repr_follow_the_annotations():
    assert Point._fields == ("x", "y") and Point3._fields == ("x", "y", "z")
    assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1)
    assert Point(1) != Point3(1)  # another class is never equal, as with dataclasses
    assert repr(Point3(1, 2, 3)) == "Point3(x=1, y=2, z=3)"


def test_a_mutable_value_has_no_hash_and_a_frozen_one_cannot_change():
    with pytest.raises(TypeError):
        hash(Point(1))
    pin = Pin("a", (1, 2))
    assert hash(pin) == hash(Pin("a", (1, 2)))
    with pytest.raises(AttributeError):
        pin.name = "b"
    with pytest.raises(AttributeError):
        del pin.name


def test_the_hook_classes_keep_their_defaults_and_copies():
    r = CheckResult("gpu_ecc", Status.OK)
    assert (r.code, r.reason, r.value, r.details, r.seconds) == ("OK", "", None, {}, 0.0)
    assert r.timestamp > 0 and CheckResult("a", Status.OK).details is not r.details
    r.details["nested"] = {"x": [1]}
    d = r.to_dict()
    d["details"]["nested"]["x"].append(2)
    assert r.details == {"nested": {"x": [1]}} and d["status"] == "ok" and d["action"] == "none"
    assert list(d) == list(CheckResult._fields)
    assert JobEnv(job_id="1") == JobEnv.from_env({"SLURM_JOB_ID": "1"})
    a = CheckSpec("c", Tier.FAST, len, "s", params={"p": 1})
    assert a == CheckSpec("c", Tier.FAST, len, "s") and hash(a) == hash(CheckSpec("c", Tier.FAST, len, "s"))


# ---------------------------------------------------------------- Words (a vocabulary without enum)


def test_words_behave_as_the_str_enums_they_replace():
    import copy
    import pickle

    from slurmkit.values import Words
    from slurmkit.verdict.base import Action, Status, Tier

    class Old(str, __import__("enum").Enum):
        OK = "ok"
        FAIL = "fail"

    class New(Words):
        OK = "ok"
        FAIL = "fail"

    for old, new in zip(Old, New):
        assert (new.value, new.name, new == new.value, hash(new) == hash(new.value)) == (
            old.value,
            old.name,
            True,
            True,
        )
        assert (str(new), repr(new).replace("New", "Old"), f"{new}") == (
            str(old).replace("Old", "New"),
            repr(old),
            f"{old}".replace("Old", "New"),
        )
        assert New(old.value) is new and isinstance(new, str) and isinstance(new, New)
        assert copy.deepcopy([new])[0] is new and copy.copy(new) is new
    assert pickle.loads(pickle.dumps([Status.WARN, Action.RESET])) == [Status.WARN, Action.RESET]
    assert pickle.loads(pickle.dumps(Status.WARN)) is Status.WARN
    assert list(New) == [New.OK, New.FAIL] and len(New) == 2
    assert [s.value for s in Status] == ["ok", "warn", "fail", "unknown"]
    assert Action("reboot").severity == 3 and Status("fail").exit_code == 2 and Tier("heavy") is Tier.HEAVY
    for bad in ("OK", "", None, 1, ["ok"]):
        with pytest.raises(ValueError, match="is not a valid New"):
            New(bad)
    with pytest.raises(AttributeError):
        New.OK = "changed"
    with pytest.raises(AttributeError):
        New.OK.extra = 1
    assert New.OK is not Status.OK and New.OK == Status.OK  # two vocabularies: equal as strings only


def test_is_finite_is_math_isfinite_and_takes_any_int():
    import math

    from slurmkit.values import is_finite

    for x in (0.0, -0.0, 1e308, -1e308, 5e-324, float("inf"), float("-inf"), float("nan"), 0, -7, True):
        assert is_finite(x) == math.isfinite(x), x
    assert is_finite(10**400)  # math.isfinite raises OverflowError here
