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


def test_words_mix_with_plain_strings_as_the_str_enums_did():
    """Where the (str, enum.Enum) classes were compared, hashed, sorted or written: the same
    answers from the words (a status read back from JSON is a plain string)."""
    import enum
    import json

    import yaml

    from slurmkit.core import jsontext
    from slurmkit.verdict.base import Action, Status

    # the enum it replaced, under the same name (so str() and repr() read the same)
    Old = enum.Enum("Status", {"OK": "ok", "WARN": "warn", "FAIL": "fail", "UNKNOWN": "unknown"}, type=str)

    for old, new in zip(Old, Status):
        assert hash(old) == hash(new) == hash(new.value)
        assert {old.value: 1}[new] == 1 and {new: 1}[old.value] == 1  # a plain string finds a member
        assert (new in {old.value}, old.value in {new}) == (old in {old.value}, old.value in {old})
        assert "%s|%r|%-16s|%s" % (new, new, new, f"{new:>16}") == "%s|%r|%-16s|%s" % (
            old,
            old,
            old,
            f"{old:>16}",
        )
        assert json.dumps({new: [new]}, indent=1) == json.dumps({old: [old]}, indent=1)
        assert jsontext.dumps({new: new}) == json.dumps({old: old}) == json.dumps({new.value: new.value})
        assert new.upper() == old.upper() and type(new.upper()) is str and type(new.value) is str
        assert new + "!" == old + "!" and "-".join([new, new]) == "-".join([old, old])
    assert sorted([Status.WARN, "ok", Status.FAIL, "unknown"]) == sorted(
        [Old.WARN, "ok", Old.FAIL, "unknown"]
    )
    assert [type(s) for s in sorted([Status.WARN, Status.OK])] == [Status, Status]
    assert max(Status, key=lambda s: s.severity) is Status.FAIL
    assert len({Status.FAIL, "fail", Status("fail")}) == 1
    for bad in (Action.NONE, "none", Status):
        with pytest.raises(ValueError):
            Status(bad)
    with pytest.raises(yaml.representer.RepresenterError):
        yaml.safe_dump({"status": Status.FAIL})  # as with the enum: write .value
    assert yaml.safe_dump({"status": Status.FAIL.value}) == "status: fail\n"
    assert "fail" in list(Status) and "FAIL" not in list(Status)


def test_words_survive_every_pickle_protocol_and_stay_the_one_member():
    import pickle

    from slurmkit.verdict.base import Action, Status, Tier

    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        for word in (*Status, *Action, *Tier):
            assert pickle.loads(pickle.dumps(word, proto)) is word
        r = CheckResult("c", Status.FAIL, action=Action.REBOOT)
        back = pickle.loads(pickle.dumps(r, proto))
        assert back == r and back.status is Status.FAIL and back.action is Action.REBOOT


def test_a_words_class_keeps_only_its_upper_case_strings_as_members():
    from slurmkit.values import Words

    class Mixed(Words):
        A = "a"
        B_2 = "b2"
        lower = "not a member"
        _HIDDEN = "h"
        NUMBER = 3

        @property
        def shout(self) -> str:
            return self.value.upper()

    assert list(Mixed) == [Mixed.A, Mixed.B_2] and Mixed.B_2.name == "B_2"
    assert Mixed.lower == "not a member" and type(Mixed.lower) is str and Mixed.NUMBER == 3
    assert Mixed("a").shout == "A"
    with pytest.raises(ValueError):
        Mixed("h")
