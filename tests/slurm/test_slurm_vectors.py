"""Hostlists and time limits against other projects' test vectors and Slurm's own rules.

Sources (cases copied, expected values as their authors wrote them unless marked):
- Slurm: testsuite/slurm_unit/common/parse_time-test.c (time_str2secs; time_str2mins is the same
  parse rounded up to minutes), src/common/slurm_opt.c arg_set_time_limit (a time limit of 0 is
  INFINITE), testsuite/slurm_unit/common/hostlist/hostlist_nth-test.c, src/common/hostlist.h
  (separators ',' or whitespace; leading zeros fix the width) and hostlist.c (MAX_RANGE = 64 * 1024,
  "Too many hosts in range"). github.com/SchedMD/slurm.
- ClusterShell: tests/NodeSetTest.py (github.com/cea-hpc/clustershell), the cases where its
  folding agrees with Slurm's (ClusterShell sorts and folds "nova[1-4]56" differently; those are
  left out).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.slurm.parse import (
    MAX_RANGE,
    ParseError,
    compress_hostlist,
    expand_hostlist,
    format_minutes,
    parse_time_limit,
)

# ---------------------------------------------------------------- time limits

# parse_time-test.c: (input, seconds); None where Slurm returns INFINITE, "bad" for NO_VAL.
SLURM_TIME_STR2SECS = [
    (None, "bad"),
    ("", "bad"),
    ("INVALID TIME", "bad"),
    ("-1", None),
    ("INFINITE", None),
    ("infinite", None),
    ("UNLIMITED", None),
    ("unlimited", None),
    ("LONG " + "-" * 200 + " INVALID TIME", "bad"),
    ("0", 0),
    ("60", 60 * 60),
    ("60:15", 60 * 60 + 15),
    ("60:0", 60 * 60),
    ("60:", "bad"),
    ("60:-10", "bad"),
    ("-60:10", "bad"),
    ("1:60:15", 1 * 60 * 60 + 60 * 60 + 15),
    ("2:60:15", 2 * 60 * 60 + 60 * 60 + 15),
    ("0:0:15", 15),
    ("0:60:0", 60 * 60),
    ("0:0:0", 0),
    ("-0:-0:-0", "bad"),
    (" 0:0:0 ", "bad"),
    ("0-1:60:15", 1 * 60 * 60 + 60 * 60 + 15),
    ("1-1:60:15", 1 * 60 * 60 * 24 + 1 * 60 * 60 + 60 * 60 + 15),
    ("365-1:60:15", 365 * 60 * 60 * 24 + 1 * 60 * 60 + 60 * 60 + 15),
    ("365-0:0:0", 365 * 60 * 60 * 24),
]


@pytest.mark.parametrize("text, seconds", SLURM_TIME_STR2SECS)
def test_time_limit_agrees_with_slurms_unit_test(text, seconds):
    if seconds == "bad":
        with pytest.raises(ParseError, match="bad time limit"):
            parse_time_limit(text if text is not None else "")
        return
    expected = None if seconds in (None, 0) else -(-seconds // 60)  # time_str2mins rounds up; 0 is INFINITE
    assert parse_time_limit(text) == expected


@pytest.mark.parametrize(
    "text, minutes, normal",
    [
        ("0:90:00", 90, "01:30:00"),  # the example: a minutes field of 60 or more
        ("1:00:60", 61, "01:01:00"),  # seconds 60 -> one more minute
        ("1:60", 2, "00:02:00"),  # minutes:seconds
        ("1-24", 2880, "2-00:00:00"),  # days-hours with 24 hours
        ("1-", 1440, "1-00:00:00"),  # days alone (Slurm's sscanf leaves the rest 0)
        ("0:30", 1, "00:01:00"),  # seconds round up
        ("100:00:00", 6000, "4-04:00:00"),
    ],
)
def test_time_limit_forms_are_normalised(text, minutes, normal):
    assert parse_time_limit(text) == minutes
    assert format_minutes(parse_time_limit(text)) == normal
    assert parse_time_limit(normal) == minutes  # the normal form reads back the same


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_time_limit_hostile_strings_parse_or_raise_parse_error(text):
    try:
        minutes = parse_time_limit(text)
    except ParseError as exc:
        assert "bad time limit" in str(exc) and "\n" not in str(exc).replace(repr(text), "")
        return
    assert minutes is None or (isinstance(minutes, int) and minutes > 0)


# ---------------------------------------------------------------- hostlists


@pytest.mark.parametrize(
    "text, names",
    [
        # Slurm hostlist_nth-test.c
        ("host[1-3],host5", ["host1", "host2", "host3", "host5"]),
        ("two[1-2]", ["two1", "two2"]),
        # Slurm hostlist.h: ',' or whitespace between entries; leading zeros fix the width
        ("alpha,beta,gamma", ["alpha", "beta", "gamma"]),
        ("alpha beta\tgamma", ["alpha", "beta", "gamma"]),
        ("tux[0-2,12] tux20", ["tux0", "tux1", "tux2", "tux12", "tux20"]),
        ("linux[0000-0002]", ["linux0000", "linux0001", "linux0002"]),
        # width of the low end: Slurm pads to strlen(lo)
        ("gpu[9-10]", ["gpu9", "gpu10"]),
        ("gpu[009-010]", ["gpu009", "gpu010"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        # ClusterShell NodeSetTest.py (expansions that agree with Slurm)
        ("supercluster0", ["supercluster0"]),
        ("0cluster", ["0cluster"]),
        ("[0]cluster", ["0cluster"]),
        ("cluster008", ["cluster008"]),
        ("cluster[0-10]", [f"cluster{i}" for i in range(11)]),
        (
            "cluster[0001,0002,1555-1559]",
            [
                "cluster0001",
                "cluster0002",
                "cluster1555",
                "cluster1556",
                "cluster1557",
                "cluster1558",
                "cluster1559",
            ],
        ),
        (
            "cluster[0001,0002,1555-1559]-ipmi",
            [
                "cluster0001-ipmi",
                "cluster0002-ipmi",
                "cluster1555-ipmi",
                "cluster1556-ipmi",
                "cluster1557-ipmi",
                "cluster1558-ipmi",
                "cluster1559-ipmi",
            ],
        ),
        ("node01[0-1]", ["node010", "node011"]),
        # order and duplicates are kept (a hostlist, not a hostset)
        ("n3,n1,n[1-2]", ["n3", "n1", "n1", "n2"]),
    ],
)
def test_expand_agrees_with_slurm_and_clustershell(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    "text, folded",
    [
        # ClusterShell NodeSetTest.py: str(NodeSet(text)) == folded ("prod-2[10-320]" left out: ClusterShell
        # folds it to "prod-[210-2320]", a different set under Slurm's rules)
        ("cluster[0-10]", "cluster[0-10]"),
        ("clu-0-[3-23]", "clu-0-[3-23]"),
        ("cluster[1-100]", "cluster[1-100]"),
        ("cluster[0001-0100]", "cluster[0001-0100]"),
        ("cluster[0034-8127]", "cluster[0034-8127]"),
        ("cluster[0001,0002,1555-1559]", "cluster[0001-0002,1555-1559]"),
        ("cluster115,cluster116,cluster117,cluster130,cluster166", "cluster[115-117,130,166]"),
        (
            "cluster115,cluster116,cluster117,cluster130,cluster[166-169],cluster170",
            "cluster[115-117,130,166-170]",
        ),
        ("node01[0-1]", "node[010-011]"),
        ("prod-02[10-20]", "prod-[0210-0220]"),
        ("prod-000[1-9]", "prod-[0001-0009]"),
        ("prod-100[040-042],sysgrp-00[01-02]", "prod-[100040-100042],sysgrp-[0001-0002]"),
        # the cases, worked out from Slurm's width rule
        ("gpu[08-10]", "gpu[08-10]"),
        ("gpu[9-10]", "gpu[9-10]"),
        ("gpu[009-010]", "gpu[009-010]"),
        ("gpu[08-09,10-12]", "gpu[08-12]"),
    ],
)
def test_compress_is_minimal_and_round_trips(text, folded):
    names = expand_hostlist(text)
    assert compress_hostlist(names) == folded
    assert expand_hostlist(folded) == names


def test_padded_and_unpadded_numbers_that_slurm_cannot_share_a_range_stay_apart():
    # gpu9 needs width <= 1, gpu010 width 3: no single range expands to both
    assert compress_hostlist(["gpu9", "gpu010"]) == "gpu9,gpu010"
    assert expand_hostlist(compress_hostlist(["n1", "n01", "n2"])) == ["n1", "n2", "n01"]


def test_slurms_range_limit_is_enforced_with_a_clear_error():
    assert len(expand_hostlist(f"n[1-{MAX_RANGE}]")) == MAX_RANGE  # 65536 hosts: Slurm accepts
    with pytest.raises(ParseError, match=r"has 65537 hosts; Slurm allows at most 65536 in one range"):
        expand_hostlist(f"n[0-{MAX_RANGE}]")
    # ClusterShell takes bigcluster[1-1000000]; Slurm does not
    with pytest.raises(ParseError, match="Slurm allows at most 65536"):
        expand_hostlist("bigcluster[1-1000000]")
    # several brackets multiply: bounded too, in well under a second
    with pytest.raises(ParseError, match="more than"):
        expand_hostlist("a[1-60000]b[1-60000]")
    # and so do many ranges side by side, each within Slurm's limit
    with pytest.raises(ParseError, match="more than"):
        expand_hostlist(",".join(f"p{i}[1-{MAX_RANGE}]" for i in range(17)))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab01-9[],- \t\n")), max_size=40) | st.text(max_size=40))
def test_hostile_hostlists_expand_or_raise_parse_error(text):
    try:
        names = expand_hostlist(text)
    except ParseError:
        return
    assert all(n and "," not in n and " " not in n for n in names)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["gpu", "n-", "x1y"]), st.integers(0, 1200), st.integers(0, 4)),
        min_size=1,
        max_size=40,
    )
)
def test_compress_round_trips_mixed_padding(items):
    """Any mix of widths: expanding the compressed form gives the same set of names."""
    names = sorted({f"{p}{str(n).zfill(w)}" for p, n, w in items})
    back = expand_hostlist(compress_hostlist(names))
    assert sorted(back) == names and len(back) == len(names)
