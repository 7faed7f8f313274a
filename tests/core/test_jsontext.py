"""slurmkit.core.jsontext gives what json gives: the same text from dumps, the same values and
the same errors from loads, on generated documents and on the edges (NaN, a byte order mark,
trailing data, control characters, non-UTF-8 bytes, a circular document)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.core import jsontext
from slurmkit.verdict.base import Status

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)


def _same(a, b) -> bool:
    """Equal, with NaN equal to NaN (json turns NaN back into a NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(documents, st.booleans(), st.sampled_from([(", ", ": "), (",", ":")]))
def test_dumps_writes_what_json_writes(doc, sort_keys, separators):
    assert jsontext.dumps(doc, sort_keys=sort_keys, separators=separators) == json.dumps(
        doc, sort_keys=sort_keys, separators=separators
    )


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_loads_reads_what_json_reads(doc, space):
    text = space + json.dumps(doc) + space
    assert _same(jsontext.loads(text), json.loads(text))
    assert _same(jsontext.loads(text.encode("utf-8")), json.loads(text.encode("utf-8")))


@pytest.mark.parametrize(
    "text",
    ["", " ", "{", '{"a": 1} x', '{"a": 1}{}', "[1,]", '"a\nb"', "NaN x", "\ufeff{}", "nul", '{"a" 1}'],
)
def test_a_malformed_document_raises_jsons_own_error(text):
    with pytest.raises(json.JSONDecodeError) as ours:
        jsontext.loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_bytes_are_read_as_json_reads_them():
    assert jsontext.loads(b"\xef\xbb\xbf{}") == json.loads(b"\xef\xbb\xbf{}") == {}  # UTF-8 with a BOM
    utf16 = '{"a": [1]}'.encode("utf-16")
    assert jsontext.loads(utf16) == json.loads(utf16) == {"a": [1]}
    with pytest.raises(UnicodeDecodeError):
        jsontext.loads(b'"\xff"')


def test_dumps_options_match_json():
    nan = {"v": float("nan"), "w": float("-inf")}
    assert jsontext.dumps(nan) == json.dumps(nan) == '{"v": NaN, "w": -Infinity}'
    with pytest.raises(ValueError):
        jsontext.dumps(nan, allow_nan=False)
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        jsontext.dumps({"s": {1}})
    assert jsontext.dumps({"s": {1}}, default=str) == json.dumps({"s": {1}}, default=str)
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="[Cc]ircular"):
        jsontext.dumps(loop)
    assert jsontext.dumps({"é": "\u2028\x00"}) == json.dumps({"é": "\u2028\x00"})  # ASCII only
    assert jsontext.dumps({Status.FAIL: [Status.OK]}) == '{"fail": ["ok"]}'  # the words are strings
    with pytest.raises(TypeError):
        jsontext.dumps({1: 2, "a": 3}, sort_keys=True)  # as json: keys of two types do not sort


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("doc", ['"x"', '{"a": 1}', '[1, "b"]', '{"a": "b"}', "1", '"ok"'])
def test_bytes_without_a_byte_order_mark_are_read_in_jsons_encoding(doc, encoding):
    """json reads bytes in the encoding it detects from the zero bytes (RFC 4627); UTF-16 or
    UTF-32 without a byte order mark is also valid UTF-8, where a string holds a NUL, a
    control character: the UTF-8 scan raised its error instead of handing the bytes to json."""
    data = doc.encode(encoding)
    assert jsontext.loads(data) == json.loads(data) == json.loads(doc)
    assert jsontext.loads(bytearray(data)) == json.loads(doc)


@settings(max_examples=200, deadline=None)
@given(documents, st.sampled_from(["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8-sig"]))
def test_loads_reads_bytes_in_any_encoding_json_reads(doc, encoding):
    data = json.dumps(doc).encode(encoding)
    assert _same(jsontext.loads(data), json.loads(data))


@pytest.mark.parametrize(
    "text", ['{"a": 1e999999}', "[" * 5 + "]" * 4, '{"a": "\\ud800"}', "-", "1.", "[1 2]"]
)
def test_edges_give_json_value_or_error(text):
    """Values and error types the same as json's (an overflowing float is inf in both)."""
    try:
        theirs = ("value", json.loads(text))
    except Exception as exc:  # noqa: BLE001
        theirs = ("error", type(exc), str(exc))
    try:
        ours = ("value", jsontext.loads(text))
    except Exception as exc:  # noqa: BLE001
        ours = ("error", type(exc), str(exc))
    assert ours == theirs


def test_a_too_long_integer_raises_jsons_error():
    text = "[" + "1" * 5000 + "]"
    with pytest.raises(ValueError) as ours:
        jsontext.loads(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


def _outcome(fn, *args, **kwargs):
    try:
        return ("value", fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001
        return ("error", type(exc), str(exc))


json_ish = st.text(
    alphabet=st.sampled_from(list('{}[]",:. -+0123456789eEtrufalsnNIy\\\n\t \x00\u00e9\ud800')), max_size=24
)


@settings(max_examples=600, deadline=None)
@given(json_ish)
def test_any_text_gives_jsons_value_or_jsons_error(text):
    ours, theirs = _outcome(jsontext.loads, text), _outcome(json.loads, text)
    if ours[0] == theirs[0] == "value":
        assert _same(ours[1], theirs[1])
    else:
        assert ours == theirs


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=24) | json_ish.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_give_jsons_value_or_jsons_error(data):
    ours, theirs = _outcome(jsontext.loads, data), _outcome(json.loads, data)
    if ours[0] == theirs[0] == "value":
        assert _same(ours[1], theirs[1])
    else:
        assert ours == theirs


keys = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
odd_documents = st.recursive(
    scalars | st.tuples(st.integers()),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3) | st.tuples(inner, inner)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(odd_documents, st.booleans(), st.booleans())
def test_dumps_of_any_keys_and_tuples_is_jsons_text_or_jsons_error(doc, sort_keys, allow_nan):
    ours = _outcome(jsontext.dumps, doc, sort_keys=sort_keys, allow_nan=allow_nan)
    theirs = _outcome(json.dumps, doc, sort_keys=sort_keys, allow_nan=allow_nan)
    assert ours == theirs
