"""The users of slurmkit.chars give the answers of the regular expressions they replaced
(969bfd2), checked on generated text with the characters that tell them apart (a final
newline, non-ASCII letters and digits, the separators). Where an old rule was written with
``^...$`` and ``re.match`` it let a name with a final newline through; the new rule refuses it,
and that is asserted here as the one intended difference."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit import metrics
from slurmkit.errors import UsageError
from slurmkit.hooks import procs
from slurmkit.slurm import drain
from slurmkit.slurm.jobenv import is_node_name
from slurmkit.sweep import cron
from slurmkit.verdict.store import check_node_name

ALPHABET = list("aZz09_.-:/ \n\t\r\x00\u00e9\u0661\u212a\u0130") + ["slurm_", "__"]
texts = st.lists(st.sampled_from(ALPHABET), max_size=10).map("".join)

OLD_NODE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"  # procs (fullmatch); store and cron with ^...$
OLD_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
OLD_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"


def _old_dollar(pattern: str, text: str) -> bool:
    """``re.match("^" + pattern + "$", text)`` as store, cron and metrics wrote it."""
    return bool(re.match("^" + pattern + "$", text))


@settings(max_examples=400, deadline=None)
@given(texts)
def test_node_name_users_match_the_old_regex_but_for_a_final_newline(text):
    full = bool(re.fullmatch(OLD_NODE, text))
    assert is_node_name(text) == full
    assert procs._v1_top_ok("slurm_" + text, None) == full
    assert procs._v2_scope_ok(text + "_slurmstepd.scope", None) == full
    assert cron._valid_name(text) == full
    try:
        check_node_name(text)
        accepted = True
    except UsageError:
        accepted = False
    assert accepted == (full and text not in (".", ".."))
    if _old_dollar(OLD_NODE, text) != full:  # only the final newline tells the old rule apart
        assert text.endswith("\n") and not accepted


@pytest.mark.parametrize("name", ["node1\n", "n\n", "a" * 128 + "\n"])
def test_a_final_newline_is_no_node_name_where_dollar_let_it_through(name):
    assert _old_dollar(OLD_NODE, name)  # what store.py and cron.py accepted before
    assert not is_node_name(name) and not cron._valid_name(name)
    with pytest.raises(UsageError):
        check_node_name(name)  # would have become "<store>/node1\n.json"
    assert not procs._v1_top_ok("slurm_" + name, None)
    assert not procs._v2_scope_ok(name + "_slurmstepd.scope", None)


def test_node_names_at_the_length_limit():
    assert is_node_name("a" * 128) and check_node_name("a" * 128)
    assert not is_node_name("a" * 129) and not cron._valid_name("a" * 129)
    assert not cron._valid_name(None) and not is_node_name(b"node1")


@settings(max_examples=400, deadline=None)
@given(st.one_of(texts, st.none(), st.integers(), st.just(0), st.just("")))
def test_drain_codes_and_names_match_the_old_substitution(value):
    text = str(value or "")
    assert drain.safe_code(value, "DEF") == (re.sub(r"[^A-Za-z0-9_]", "", text)[:64] or "DEF")
    assert drain.safe_name(value, "def") == (re.sub(r"[^A-Za-z0-9_.-]", "", text)[:64] or "def")


def test_drain_codes_are_cut_at_64_after_the_filter():
    assert drain.safe_code("\u00e9" * 100 + "A" * 70, "X") == "A" * 64
    assert drain.safe_name("/" * 64 + "b", "X") == "b"


@settings(max_examples=400, deadline=None)
@given(texts, texts)
def test_metric_and_label_names_match_the_old_regex_but_for_a_final_newline(name, label):
    def renders(n, labels):
        try:
            metrics.render([metrics.Sample(n, "doc", labels, 1.0)])
            return True
        except ValueError:
            return False

    full_name = bool(re.fullmatch(OLD_METRIC, name))
    assert renders(name, {}) == full_name
    if full_name:
        good_label = bool(re.fullmatch(OLD_LABEL, label)) and not label.startswith("__")
        assert renders(name, {label: "v"}) == good_label
        if _old_dollar(OLD_LABEL, label) != bool(re.fullmatch(OLD_LABEL, label)):
            assert label.endswith("\n") and not renders(name, {label: "v"})
    if _old_dollar(OLD_METRIC, name) != full_name:
        assert name.endswith("\n")


@pytest.mark.parametrize("name", ["up\n", "slurmkit_x\n"])
def test_a_metric_name_with_a_final_newline_is_refused(name):
    """re.match with ``$`` accepted it, and the newline would have split the exposition line."""
    assert _old_dollar(OLD_METRIC, name)
    with pytest.raises(ValueError, match="invalid metric name"):
        metrics.render([metrics.Sample(name, "doc", {}, 1.0)])
    with pytest.raises(ValueError, match="invalid label name"):
        metrics.render([metrics.Sample("up", "doc", {"node\n": "x"}, 1.0)])


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, max_size=3))
def test_metric_file_names_match_the_old_substitution(parts):
    expected = "_".join(["p", *(re.sub(r"[^A-Za-z0-9._-]", "_", x) for x in parts if x)]) + ".prom"
    assert metrics.file_name("p", *parts) == expected
    assert "/" not in metrics.file_name("p", *parts) and "\n" not in metrics.file_name("p", *parts)
