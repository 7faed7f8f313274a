"""The AdminComment codec (slurmkit.slurm.admincomment): the token survives sacctmgr's
lower-casing, large summaries collapse to per-node totals, and hostile or undecodable
comments raise SummaryError or are passed over, never crash."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.slurm import admincomment as ac


def test_token_round_trip_survives_sacctmgr_lower_casing():
    summary, token = ac.job_summary("77", {"n1": {"acct": "on", "gpus": {"0": {"u": 5.0}}}}, ["n2"])
    assert token.startswith("sk1:") and token == token.lower() and " " not in token
    assert ac.decode(token) == summary and ac.decode(token.upper()) == summary
    assert summary["missing"] == ["n2"]
    assert ac.find_token(f"js1:abc {token}") == token
    assert ac.foreign_text(f"JS1:abc site-note {token}") == "JS1:abc site-note"
    assert ac.foreign_text(token) == ""


def test_large_summaries_collapse_to_per_node_totals():
    def one(i, g):
        return {
            "u": (i * 7 + g * 13) % 100 + 0.1 * g,
            "t": 3600.0 + i,
            "b": 1800.0 + g + i * 3.7,
            "m": 1000 * g + i,
            "c": 81559,
            "p": 1 if g else 0,
        }

    nodes = {f"node{i:03d}": {"acct": "on", "gpus": {str(g): one(i, g) for g in range(8)}} for i in range(64)}
    full = ac.encode({"v": 1, "job": "9", "nodes": nodes, "missing": []})
    summary, token = ac.job_summary("9", nodes, max_chars=len(full) - 1)
    assert len(token) < len(full) / 2
    agg = summary["nodes"]["node000"]
    assert agg["agg"] is True and agg["n"] == 8 and agg["touched"] == 7 and agg["m"] == 7000
    assert agg["b"] == pytest.approx(sum(1800.0 + g for g in range(8)))
    assert ac.job_summary("9", nodes, max_chars=len(full))[1] == full


@pytest.mark.parametrize(
    "bad",
    [
        "sk1:",
        "sk1:!!!!",
        "SK1:" + "abc",
        "sk1:1f8b0800",
        "sk1:h4sIAAAAAAAA/w==",
        ac.PREFIX + __import__("gzip").compress(b'{"nodes": NaN}').hex(),
        ac.PREFIX + __import__("gzip").compress(b"[1]").hex(),
    ],
)
def test_undecodable_tokens_raise_summary_error(bad):
    with pytest.raises(ac.SummaryError):
        ac.decode(bad)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_hostile_admin_comments_never_crash_the_codec(text):
    token = ac.encode({"v": 1, "nodes": {}})
    assert ac.find_token(f"{text} {token}") in (token, ac.find_token(text))
    assert token not in ac.foreign_text(f"{text} {token}")
    found = ac.find_token(text)
    if found is not None:
        try:
            ac.decode(found)
        except ac.SummaryError:
            pass
