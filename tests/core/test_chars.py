"""slurmkit.chars: each rule is the full-string match of the regular expression its
docstring names, checked against re on generated text (including the final newline that
``$`` would let through)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.chars import ASCII_LETTERS, DIGITS, NAME_CHARS, keep_only, only, replace_others
from slurmkit.slurm.jobenv import is_node_name

texts = st.text(alphabet=st.sampled_from(list("aZx09._-:/ \n\u00e9\u0661")), max_size=12)


@settings(max_examples=500, deadline=None)
@given(texts)
def test_replace_and_keep_match_re(text):
    assert replace_others(text) == re.sub(r"[^A-Za-z0-9._-]", "_", text)
    assert keep_only(text, NAME_CHARS) == re.sub(r"[^A-Za-z0-9._-]", "", text)


@settings(max_examples=500, deadline=None)
@given(texts)
def test_only_matches_re_fullmatch(text):
    first = frozenset(ASCII_LETTERS + "_:")
    rest = frozenset(ASCII_LETTERS + DIGITS + "_:")
    assert only(text, rest, first) == bool(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text))
    assert is_node_name(text) == bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", text))


def test_node_name_edges():
    assert is_node_name("a" * 128) and not is_node_name("a" * 129)
    assert is_node_name("gpu-01.rack_2") and is_node_name("0node")
    for bad in ("", ".", "..", "-n", "_n", ".n", "node\n", "no de", "a/b", "n\u00e9", None, 7):
        assert not is_node_name(bad), bad
