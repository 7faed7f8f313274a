"""slurmkit.report.efficiency piece by piece, every expected value worked by hand: the
sacct row parser and its counters, times and elapsed, Slurm's own usage TRES, grouping and
its order, totals, cell formatting, the table/CSV/Markdown/JSON output, ``ssubmit``'s one
line and the live sacct query. Written to kill the mutants etc/dev/mutation.sh found
surviving (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import csv
import io
import json
from types import SimpleNamespace

import pytest

from slurmkit.errors import UsageError
from slurmkit.report import efficiency as reff
from slurmkit.report.efficiency import JobEfficiency
from slurmkit.report.sacct import parse_time
from slurmkit.slurm.admincomment import encode
from slurmkit.slurm.parse import SACCT_DELIMITER

COLS = list(reff.FIELDS)
T0 = 1_700_000_000  # an epoch; End times below are T0 + something


def line(
    job="10",
    raw=None,
    state="COMPLETED",
    tres="cpu=1,gres/gpu=2,node=1",
    start=str(T0 - 3600),
    end=str(T0),
    elapsed="3600",
    user="alice",
    account="acct",
    partition="gpu",
    nodes="n1",
    ave="",
    mx="",
    comment="",
    sep="|",
):
    return sep.join(
        [
            job,
            job if raw is None else raw,
            state,
            tres,
            start,
            end,
            elapsed,
            user,
            account,
            partition,
            nodes,
            ave,
            mx,
        ]
        + [comment]
    )


def parse(lines, **kw):
    kw.setdefault("sep", "|")
    kw.setdefault("idle_below", 10.0)
    return reff.parse(lines, kw.pop("columns", COLS), **kw)


def summary_token(nodes, missing=()):
    return encode({"v": 1, "job": "x", "nodes": nodes, "missing": list(missing)})


# --------------------------------------------------------------------------- small helpers


def test_max_of_two_optional_numbers():
    assert reff._max(None, None) is None
    assert reff._max(1.0, None) == 1.0
    assert reff._max(None, 2.0) == 2.0
    assert reff._max(3.0, 2.0) == 3.0
    assert reff._max(2.0, 3.0) == 3.0


def test_epoch_of_sacct_times():
    assert reff._epoch(" 1700000000 ") == 1700000000
    assert reff._epoch("2026-11-10T10:00:00") == parse_time("2026-11-10T10:00:00") is not None
    for unknown in ("", None, "Unknown", "None", "now", "2026-13-45T99:00:00", "yesterday"):
        assert reff._epoch(unknown) is None, unknown


@pytest.mark.parametrize(
    "raw,start,end,expected",
    [
        ("3600", "", "", 3600),  # ElapsedRaw wins, Start/End not needed
        (" 7 ", "100", "50", 7),
        ("0", "100", "200", 0),
        ("", "100", "160", 60),
        ("", "100", "100", 0),  # no time at all is still a time
        ("", "100", "99", None),  # End before Start
        ("-5", "100", "160", 60),  # not digits: from Start/End
        ("1.5", "100", "160", 60),
        (None, "100", "160", 60),
        ("", "Unknown", "160", None),
        ("", "100", "Unknown", None),
        ("x", "", "", None),
    ],
)
def test_elapsed_from_elapsed_raw_or_start_and_end(raw, start, end, expected):
    assert reff._elapsed(raw, start, end) == expected


def test_step_usage_reads_slurms_gpu_tres():
    assert reff._step_usage("gres/gpuutil=42,gres/gpumem=1000M", "gres/gpumem=2G") == (42.0, 2048.0)
    assert reff._step_usage("gres/gpuutil=42,gres/gpumem=1000M", "cpu=1") == (42.0, 1000.0)  # Max lacks it
    assert reff._step_usage("cpu=1", "") == (None, None)
    assert reff._step_usage("gres/gpuutil=nan", "gres/gpumem=3M") == (None, 3.0)
    assert reff._step_usage("gres/gpuutil=7,gres/gpumem=lots", "") == (7.0, None)  # bad memory: unknown
    assert reff._step_usage("gres/gpuutil=7", "gres/gpumem=0") == (7.0, 0.0)
    assert reff._step_usage("=garbage=", "gres/gpumem=2G") == (None, None)
    assert reff._step_usage("gres/gpuutil=7", "=garbage=") == (None, None)


def test_from_slurm_tres_clips_and_spreads_the_job_average():
    job = JobEfficiency(job_id="1", gpus=4, elapsed_s=1800.0)
    reff.from_slurm_tres(job, None, 100.0)
    assert job.source is None and job.gpus_known == 0 and job.util_pct is None and job.peak_mem_mib is None
    reff.from_slurm_tres(job, 25.0, 5000.0)
    assert (job.source, job.gpus_known, job.util_pct, job.used_gpu_s, job.peak_mem_mib) == (
        "slurm-tres",
        4,
        25.0,
        1800.0,  # 25 % of 4 GPUs x 1800 s
        5000.0,
    )
    assert job.note == "Slurm gres/gpuutil (job average; no per-GPU split)"
    assert job.gpus_touched is None and job.gpus_idle is None
    over = JobEfficiency(job_id="2", gpus=2, elapsed_s=100.0)
    reff.from_slurm_tres(over, 150.0, None)
    assert (over.util_pct, over.used_gpu_s) == (100.0, 200.0)
    under = JobEfficiency(job_id="3", gpus=2, elapsed_s=100.0)
    reff.from_slurm_tres(under, -3.0, None)
    assert (under.util_pct, under.used_gpu_s) == (0.0, 0.0)


def test_job_hours_and_its_dict():
    job = JobEfficiency(
        job_id="7", gpus=4, elapsed_s=1800.0, gpus_known=3, used_gpu_s=2700.0, idle_gpu_s=900.0
    )
    assert (job.alloc_gpu_h, job.known_gpu_h, job.unknown_gpu_h) == (2.0, 1.5, 0.5)
    d = job.to_dict()
    assert d["job_id"] == "7" and d["gpus"] == 4 and d["per_gpu"] == [] and d["source"] is None
    assert (d["alloc_gpu_h"], d["known_gpu_h"], d["unknown_gpu_h"], d["used_gpu_h"], d["idle_gpu_h"]) == (
        2.0,
        1.5,
        0.5,
        0.75,
        0.25,
    )
    assert set(d) == set(job.__dataclass_fields__) | {
        "alloc_gpu_h",
        "known_gpu_h",
        "unknown_gpu_h",
        "used_gpu_h",
        "idle_gpu_h",
    }


# --------------------------------------------------------------------------- the row parser


def test_a_job_row_becomes_a_job_with_every_field():
    res = parse(
        [
            line(
                job="10",
                state="CANCELLED by 1000",
                user="bob",
                account="ml",
                partition="a100",
                nodes="n[1-2]",
            )
        ]
    )
    assert (res.rows, res.malformed, res.bad_comments, res.skipped_running, res.warnings) == (1, 0, 0, 0, [])
    (job,) = res.jobs
    assert (job.job_id, job.user, job.account, job.partition, job.state, job.nodes) == (
        "10",
        "bob",
        "ml",
        "a100",
        "CANCELLED",
        "n[1-2]",
    )
    assert (job.gpus, job.elapsed_s) == (2, 3600.0) and isinstance(job.elapsed_s, float)
    assert job.note == "no slurmkit summary" and job.source is None and job.util_pct is None


def test_counters_and_warnings_name_the_line():
    lines = [
        "",  # blank lines are not rows
        "   ",
        line(job="1", tres="cpu=4,node=1"),  # a row, but no GPU anywhere: not counted as a job
        "1|gres/gpu=1",  # too few fields
        line(job="abc"),  # bad job id
        line(job="2", state="RUNNING"),
        line(job="3", state="PENDING"),
        line(job="4", tres="gres/gpu=x=1,,"),
        line(job="5", tres="cpu=1,gres/gpu=0"),  # no GPU: not a GPU job, not malformed
        line(job="6", elapsed="", start="Unknown"),
        line(job="7", end="yesterday"),
        line(job="8", comment="SK1:not-a-summary"),
        line(job="9") + "\r\n",
        "2|gres/gpu=1",  # a second one of each counts twice
        line(job="12", comment="SK1:also-not"),
    ]
    res = parse(lines, first_line=5)
    assert res.rows == 13
    assert res.malformed == 6
    assert res.skipped_running == 2
    assert res.bad_comments == 2
    assert [j.job_id for j in res.jobs] == ["8", "9", "12"]
    assert res.warnings[:5] == [
        f"line 8: wrong field count (expected {len(COLS)})",
        "line 9: bad JobID or JobIDRaw",
        "line 12: garbage AllocTRES",
        "line 14: no usable ElapsedRaw or Start/End",
        "line 15: bad End time",
    ]
    assert len(res.warnings) == 8 and res.warnings[5].startswith("line 16: job 8: ")
    assert res.warnings[6] == f"line 18: wrong field count (expected {len(COLS)})"
    assert res.warnings[7].startswith("line 19: job 12: ")
    bad = res.jobs[0]
    assert bad.note.startswith("unreadable summary (") and bad.note.endswith(")") and bad.source is None
    assert res.jobs[1].elapsed_s == 3600.0 and res.jobs[1].nodes == "n1"


def test_line_numbers_start_at_one_by_default():
    res = parse(["1|gres/gpu=1"])
    assert res.warnings == [f"line 1: wrong field count (expected {len(COLS)})"]


@pytest.mark.parametrize("end", ["Unknown", "None", "N/A", ""])
def test_an_unknown_end_is_kept_even_with_a_window(end):
    res = parse([line(end=end, elapsed="60")], window=(T0, T0 + 10))
    assert [j.job_id for j in res.jobs] == ["10"] and res.malformed == 0 and res.jobs[0].elapsed_s == 60.0


def test_the_window_holds_ends_from_its_start_up_to_not_including_its_end():
    rows = [line(job=str(i), end=str(T0 + d)) for i, d in enumerate([-1, 0, 1, 9, 10, 11], 1)]
    assert [j.job_id for j in parse(rows, window=(T0, T0 + 10)).jobs] == ["2", "3", "4"]
    assert len(parse(rows).jobs) == 6  # no window: every ended job


def test_columns_are_found_by_name_in_any_case_and_order():
    cols = [" admincomment", "STATE", "AllocTRES", "JobID", "ElapsedRaw"]
    tok = summary_token({"n1": {"gpus": {"0": {"u": 50.0, "t": 100.0, "p": 1}}}})
    res = reff.parse(
        [SACCT_DELIMITER.join([tok, "COMPLETED", "gres/gpu=1", "42", "100"])],
        cols,
        sep=SACCT_DELIMITER,
        idle_below=10.0,
    )
    (job,) = res.jobs
    assert (job.job_id, job.state, job.gpus, job.elapsed_s, job.user, job.nodes) == (
        "42",
        "COMPLETED",
        1,
        100.0,
        "",
        "",
    )
    assert (job.source, job.util_pct, job.gpus_known, job.gpus_touched) == ("slurmkit", 50.0, 1, 1)


def test_missing_columns_are_named_with_the_command_to_save_them():
    with pytest.raises(UsageError) as exc:
        reff.parse([], ["JobID", "ElapsedRaw"], sep="|", idle_below=10.0)
    msg = str(exc.value)
    assert msg.startswith("sacct data lacks column(s) State, AllocTRES, AdminComment; save it with: ")
    assert msg.endswith(reff.recommended_command())


def test_recommended_command_lists_every_field():
    assert reff.recommended_command() == (
        "save it with: SLURM_TIME_FORMAT=%s sacct -a -S 2026-11-01 -E 2026-12-01 --parsable2 "
        "--format=JobID,JobIDRaw,State,AllocTRES,Start,End,ElapsedRaw,User,Account,Partition,NodeList,"
        "TRESUsageInAve,TRESUsageInMax,AdminComment > eff.txt"
    )


def test_the_idle_threshold_reaches_the_summary():
    tok = summary_token({"n1": {"gpus": {"0": {"u": 20.0, "t": 3600.0, "p": 1}}}})
    assert parse([line(comment=tok, tres="gres/gpu=1")], idle_below=20.0).jobs[0].gpus_idle == 0
    assert parse([line(comment=tok, tres="gres/gpu=1")], idle_below=20.5).jobs[0].gpus_idle == 1


def test_a_summary_token_after_other_admin_comment_text_is_found():
    tok = summary_token({"n1": {"gpus": {"0": {"u": 80.0, "t": 3600.0, "p": 1}}}})
    (job,) = parse([line(comment="site note " + tok, tres="gres/gpu=1")]).jobs
    assert (job.source, job.util_pct, job.note) == ("slurmkit", 80.0, "")


def test_steps_give_slurms_usage_to_jobs_without_a_summary():
    """Steps carry Slurm's gres/gpuutil and gres/gpumem; a job takes the largest over its
    steps (found by JobIDRaw, else by JobID), unless its own summary says more."""
    tok = summary_token({"n1": {"gpus": {"0": {"u": 90.0, "t": 3600.0, "p": 1}}}})
    rows = [
        line(job="20.0", raw="20.0", ave="gres/gpuutil=30,gres/gpumem=1G", tres="cpu=1"),
        line(job="20.1", raw="20.1", ave="gres/gpuutil=40", mx="gres/gpumem=3G", tres="cpu=1"),
        line(job="20.batch", raw="20.batch", ave="gres/gpuutil=50,gres/gpumem=512M", tres="cpu=1"),
        line(job="20"),
        line(job="21", tres="gres/gpu=1", comment=tok),
        line(job="21.0", raw="21.0", ave="gres/gpuutil=5", tres="cpu=1"),
        line(job="22_1", raw="23"),  # an array task: its steps are under its JobID
        line(job="22_1.0", raw="23.0", ave="gres/gpuutil=60", tres="cpu=1"),
        line(job="24"),
        line(job="24.0", raw="24.0", ave="cpu=1", tres="cpu=1"),  # a step without usage
        line(job="25.0", raw="25.0", ave="=bad=", tres="cpu=1"),
        line(job="25"),
    ]
    res = parse(rows)
    by = {j.job_id: j for j in res.jobs}
    assert [j.job_id for j in res.jobs] == ["20", "21", "22_1", "24", "25"]
    assert res.rows == len(rows) and res.malformed == 0
    j20 = by["20"]
    assert (j20.source, j20.util_pct, j20.peak_mem_mib, j20.gpus_known) == ("slurm-tres", 50.0, 3072.0, 2)
    assert j20.used_gpu_s == 0.5 * 2 * 3600
    assert (by["21"].source, by["21"].util_pct) == ("slurmkit", 90.0)
    assert (by["22_1"].source, by["22_1"].util_pct) == ("slurm-tres", 60.0)
    for jid in ("24", "25"):
        assert by[jid].source is None and by[jid].util_pct is None and by[jid].note == "no slurmkit summary"


def test_a_step_with_only_memory_still_counts():
    rows = [line(job="30.0", raw="30.0", ave="gres/gpumem=2G", tres="cpu=1"), line(job="30")]
    (job,) = parse(rows).jobs
    # memory but no utilisation: Slurm's average is not known, so the job stays unknown
    assert job.source is None and job.util_pct is None and job.peak_mem_mib is None


def test_without_a_jobidraw_column_the_job_id_is_the_key():
    cols = [c for c in COLS if c != "JobIDRaw"]
    row = line(job="40").split("|")
    del row[1]
    steprow = line(job="40.0", ave="gres/gpuutil=70", tres="cpu=1").split("|")
    del steprow[1]
    res = parse(["|".join(steprow), "|".join(row)], columns=cols)
    (job,) = res.jobs
    assert (job.job_id, job.source, job.util_pct) == ("40", "slurm-tres", 70.0)


def test_a_row_without_gres_gpu_text_is_skipped_before_it_is_split():
    """A row that does not mention gres/gpu cannot be a GPU job or carry GPU usage: it
    counts as a row and nothing else, even when it is not well formed."""
    res = parse(["a|b", line(tres="cpu=1,node=1")])
    assert (res.rows, res.malformed, res.jobs, res.warnings) == (2, 0, [], [])


# --------------------------------------------------------------------------- grouping


def job(
    jid,
    user,
    gpus,
    elapsed,
    known=None,
    touched=None,
    idle=None,
    used=0.0,
    idle_s=0.0,
    peak=None,
    cap=None,
    **kw,
):
    return JobEfficiency(
        job_id=jid,
        user=user,
        gpus=gpus,
        elapsed_s=elapsed,
        gpus_known=gpus if known is None else known,
        gpus_touched=touched,
        gpus_idle=idle,
        used_gpu_s=used,
        idle_gpu_s=idle_s,
        peak_mem_mib=peak,
        mem_capacity_mib=cap,
        **kw,
    )


JOBS = [
    # alice: 2 x 1 h at 50 %, then 4 x 0.5 h with 3 idle GPUs
    job(
        "1",
        "alice",
        2,
        3600.0,
        touched=2,
        idle=0,
        used=3600.0,
        peak=40000.0,
        cap=80000.0,
        account="a",
        source="slurmkit",
    ),
    job("2", "alice", 4, 1800.0, touched=1, idle=3, used=1800.0, idle_s=5400.0, peak=70000.0, cap=80000.0),
    # bob: Slurm's job-wide average only (no per-GPU split), memory without a capacity
    job("3", "bob", 1, 7200.0, used=3600.0, peak=1000.0, util_pct=50.0, source="slurm-tres"),
    job("4", "bob", 1, 0.0, used=0.0, peak=2000.0),
    # nobody named: 8 GPUs, nothing measured
    job("5", "", 8, 900.0, known=0),
    # carol: one GPU fully used
    job("6", "carol", 1, 3600.0, touched=1, idle=0, used=3600.0, peak=20000.0, cap=40000.0),
]


def test_group_by_user_by_hand():
    rows = reff.group(JOBS, "user")
    assert [r["user"] for r in rows] == ["alice", "bob", "carol", "-"]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    alice, bob, carol, nobody = rows
    assert alice == {
        "user": "alice",
        "rank": 1,
        "jobs": 2,
        "gpus": 6,
        "gpus_known": 6,
        "gpus_touched": 3,
        "gpus_idle": 3,
        "alloc_gpu_h": 4.0,
        "known_gpu_h": 4.0,
        "used_gpu_h": 1.5,
        "idle_gpu_h": 1.5,
        "unknown_gpu_h": 0.0,
        "util_pct": 37.5,
        "wasted_gpu_h": 2.5,
        "peak_mem_pct": 87.5,
        "peak_mem_mib": 70000.0,
        "mem_capacity_mib": 80000.0,
    }
    assert bob == {
        "user": "bob",
        "rank": 2,
        "jobs": 2,
        "gpus": 2,
        "gpus_known": 2,
        "gpus_touched": None,
        "gpus_idle": None,
        "alloc_gpu_h": 2.0,
        "known_gpu_h": 2.0,
        "used_gpu_h": 1.0,
        "idle_gpu_h": None,
        "unknown_gpu_h": 0.0,
        "util_pct": 50.0,
        "wasted_gpu_h": 1.0,
        "peak_mem_pct": None,
        "peak_mem_mib": 1000.0,  # the first one seen without a capacity
        "mem_capacity_mib": None,
    }
    assert (carol["util_pct"], carol["wasted_gpu_h"], carol["idle_gpu_h"], carol["gpus_idle"]) == (
        100.0,
        0.0,
        0.0,
        0,
    )
    assert (carol["peak_mem_pct"], carol["gpus_touched"]) == (50.0, 1)
    assert nobody == {
        "user": "-",
        "rank": 4,
        "jobs": 1,
        "gpus": 8,
        "gpus_known": 0,
        "gpus_touched": None,
        "gpus_idle": None,
        "alloc_gpu_h": 2.0,
        "known_gpu_h": 0.0,
        "used_gpu_h": None,
        "idle_gpu_h": None,
        "unknown_gpu_h": 2.0,
        "util_pct": None,
        "wasted_gpu_h": None,
        "peak_mem_pct": None,
        "peak_mem_mib": None,
        "mem_capacity_mib": None,
    }


def test_group_by_job_carries_the_jobs_own_fields():
    rows = reff.group(JOBS[:2], "job")
    assert [r["job"] for r in rows] == ["2", "1"]  # 1.5 idle GPU-hours first
    r2 = rows[1]
    assert {k: r2[k] for k in ("user", "account", "partition", "state", "elapsed_s", "source", "note")} == {
        "user": "alice",
        "account": "a",
        "partition": "",
        "state": "",
        "elapsed_s": 3600.0,
        "source": "slurmkit",
        "note": "",
    }
    assert "user" not in reff.group(JOBS[:1], "account")[0]
    assert reff.group(JOBS[:1], "account")[0]["account"] == "a"


def test_a_job_id_is_never_replaced_by_a_dash():
    rows = reff.group([job("0", "", 1, 60.0, known=0)], "job")
    assert rows[0]["job"] == "0"


def test_the_order_breaks_each_tie_by_the_next_key():
    """Most idle GPU-hours first; then most wasted (allocated, known, not used); then the
    lower utilisation; then the name. Unknown utilisation last."""
    jobs = [
        job("1", "z-unknown", 4, 3600.0, known=0),
        job("2", "b-tie", 1, 3600.0, touched=1, idle=0, used=1800.0),
        job("3", "a-tie", 1, 3600.0, touched=1, idle=0, used=1800.0),
        job("4", "less-wasted", 1, 3600.0, touched=1, idle=0, used=2700.0),
        job("5", "low-util", 2, 3600.0, touched=2, idle=0, used=3600.0),  # wasted 1 h, 50 %
        job("6", "high-util", 3, 3600.0, touched=3, idle=0, used=7200.0),  # wasted 1 h, 66.7 %
        job("7", "idle", 1, 3600.0, touched=0, idle=1, used=0.0, idle_s=3600.0),
        job("8", "more-idle", 2, 3600.0, touched=0, idle=2, used=0.0, idle_s=7200.0),
    ]
    rows = reff.group(jobs, "user")
    assert [r["user"] for r in rows] == [
        "more-idle",
        "idle",
        "low-util",
        "high-util",
        "a-tie",
        "b-tie",
        "less-wasted",
        "z-unknown",
    ]


def test_the_highest_memory_fraction_wins_and_the_first_on_a_tie():
    jobs = [
        job("1", "u", 1, 60.0, peak=20000.0, cap=40000.0),  # 50 %
        job("2", "u", 1, 60.0, peak=30000.0, cap=60000.0),  # 50 % too: the first stays
        job("3", "u", 1, 60.0, peak=10000.0, cap=40000.0),  # 25 %
        job("4", "u", 1, 60.0, peak=99999.0),  # no capacity: no fraction, does not replace
    ]
    (r,) = reff.group(jobs, "user")
    assert (r["peak_mem_pct"], r["peak_mem_mib"], r["mem_capacity_mib"]) == (50.0, 20000.0, 40000.0)
    (r,) = reff.group(jobs[2:], "user")
    assert (r["peak_mem_pct"], r["peak_mem_mib"], r["mem_capacity_mib"]) == (25.0, 10000.0, 40000.0)
    (r,) = reff.group(jobs[3:] + jobs[2:3], "user")  # a fraction replaces a bare peak
    assert (r["peak_mem_pct"], r["peak_mem_mib"], r["mem_capacity_mib"]) == (25.0, 10000.0, 40000.0)
    (r,) = reff.group([job("5", "u", 1, 60.0, peak=500.0, cap=0.0)], "user")  # capacity 0: none
    assert (r["peak_mem_pct"], r["peak_mem_mib"], r["mem_capacity_mib"]) == (None, 500.0, None)


def test_a_split_job_with_unknown_idle_counts_zero_idle():
    (r,) = reff.group([job("1", "u", 2, 3600.0, touched=1, idle=None, used=3600.0)], "user")
    assert (r["gpus_touched"], r["gpus_idle"], r["idle_gpu_h"]) == (1, 0, 0.0)


def test_totals_by_hand():
    rows = reff.group(JOBS, "user")
    t = reff.totals(rows)
    assert t == {
        "jobs": 6,
        "gpus": 17,
        "gpus_known": 9,
        "alloc_gpu_h": 9.0,
        "known_gpu_h": 7.0,
        "used_gpu_h": 3.5,
        "idle_gpu_h": 1.5,
        "unknown_gpu_h": 2.0,
        "util_pct": 50.0,
    }
    assert reff.totals(reff.group(JOBS[4:5], "user"))["util_pct"] is None
    assert reff.totals([])["util_pct"] is None and reff.totals([])["jobs"] == 0


# --------------------------------------------------------------------------- rendering


def test_columns_per_grouping():
    assert [k for k, _ in reff.columns_for("user")] == [
        "rank",
        "user",
        "jobs",
        "gpus",
        "gpus_touched",
        "gpus_idle",
        "alloc_gpu_h",
        "used_gpu_h",
        "idle_gpu_h",
        "unknown_gpu_h",
        "util_pct",
        "peak_mem_pct",
    ]
    assert [h for _, h in reff.columns_for("job")] == [
        "#",
        "job",
        "user",
        "account",
        "state",
        "GPUs",
        "touched",
        "idle GPUs",
        "GPU-h alloc",
        "GPU-h used",
        "GPU-h idle",
        "GPU-h unknown",
        "util %",
        "peak mem %",
        "note",
    ]


@pytest.mark.parametrize(
    "key,value,decimals,text",
    [
        ("util_pct", None, 2, "unknown"),
        ("gpus_touched", None, 2, "unknown"),
        ("gpus_idle", None, 2, "unknown"),
        ("peak_mem_pct", None, 2, "unknown"),
        ("used_gpu_h", None, 2, "unknown"),
        ("idle_gpu_h", None, 2, "unknown"),
        ("unknown_gpu_h", None, 2, "-"),
        ("note", None, 2, "-"),
        ("util_pct", 37.55, 4, "37.5"),  # one decimal for percentages, whatever `decimals`
        ("peak_mem_pct", 100.0, 2, "100.0"),
        ("alloc_gpu_h", 1234.5, 2, "1,234.50"),
        ("alloc_gpu_h", 0.5, 4, "0.5000"),
        ("gpus", 3, 2, "3"),
        ("user", "x_pct", 2, "x_pct"),
    ],
)
def test_fmt_cell(key, value, decimals, text):
    assert reff.fmt_cell(key, value, decimals) == text


def rendered(rows, by, fmt, meta=None):
    out = io.StringIO()
    reff.render(rows, by, fmt, meta if meta is not None else {"title": "T"}, out)
    return out.getvalue()


def test_text_table_by_hand():
    rows = reff.group(JOBS[:3], "user")  # alloc 6 GPU-h: four decimals
    head = "GPU-h alloc  GPU-h used  GPU-h idle  GPU-h unknown  util %  peak mem %"
    rule = "-----  -----  ----  ----  -------  ---------  -----------  ----------  ----------  -------------  ------  ----------"
    assert rendered(rows, "user", "table").split("\n") == [
        "T",
        "    #  user   jobs  GPUs  touched  idle GPUs  " + head,
        rule,
        "    1  alice     2     6        3          3       4.0000      1.5000      1.5000         0.0000    37.5        87.5",
        "    2  bob       1     1  unknown    unknown       2.0000      1.0000     unknown         0.0000    50.0     unknown",
        rule,
        "TOTAL            3     7                           6.0000      2.5000      1.5000         0.0000    41.7",
        "",
    ]


def test_ten_allocated_gpu_hours_or_more_get_two_decimals():
    ten = reff.group([job("1", "u", 10, 3600.0, touched=10, idle=0, used=3600.0)], "user")
    assert reff.totals(ten)["alloc_gpu_h"] == 10.0
    assert "10.00  " in rendered(ten, "user", "table") and "10.0000" not in rendered(ten, "user", "table")
    under = reff.group([job("1", "u", 1, 35999.0, touched=1, idle=0, used=3600.0)], "user")
    assert "9.9997" in rendered(under, "user", "table")


def test_markdown_by_hand():
    rows = reff.group(JOBS[5:6], "user")
    assert rendered(rows, "user", "markdown").split("\n") == [
        "| \\# | user | jobs | GPUs | touched | idle GPUs | GPU-h alloc | GPU-h used | GPU-h idle | GPU-h unknown "
        "| util % | peak mem % |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| 1 | carol | 1 | 1 | 1 | 0 | 1.0000 | 1.0000 | 0.0000 | 0.0000 | 100.0 | 50.0 |",
        "| TOTAL |  | 1 | 1 |  |  | 1.0000 | 1.0000 | 0.0000 | 0.0000 | 100.0 |  |",  # not bold
        "",
    ]


def test_by_job_the_text_columns_are_left_aligned_and_not_totalled():
    """The hours of the total stay hours when every row's are 0 or unknown: "0.0000", not
    "0" (totals() summed them from an int 0; fixed with this test)."""
    rows = reff.group(
        [job("123", "alice", 1, 3600.0, known=0, note="no slurmkit summary", state="FAILED")], "job"
    )
    lines = rendered(rows, "job", "table", {}).split("\n")
    assert lines[0] == ""  # an empty title
    assert lines[1].startswith("    #  job  user   account  state   GPUs  touched")
    assert lines[1].endswith("  util %  peak mem %  note")
    assert lines[3] == (
        "    1  123  alice           FAILED     1  unknown    unknown       1.0000     unknown     unknown"
        "         1.0000  unknown     unknown  no slurmkit summary"
    )
    assert lines[5] == (
        "TOTAL                                  1                           1.0000      0.0000      0.0000"
        "         1.0000  unknown"
    )
    assert lines[6:] == [""]


def test_csv_keeps_numbers_and_unknown_as_empty():
    rows = reff.group(JOBS[:3], "user")
    got = list(csv.reader(io.StringIO(rendered(rows, "user", "csv"))))
    assert got[0] == [k for k, _ in reff.columns_for("user")]
    assert got[1] == ["1", "alice", "2", "6", "3", "3", "4.0", "1.5", "1.5", "0.0", "37.5", "87.5"]
    assert got[2] == ["2", "bob", "1", "1", "", "", "2.0", "1.0", "", "0.0", "50.0", ""]
    assert len(got) == 3  # no total row


def test_json_holds_rows_totals_and_meta():
    rows = reff.group(JOBS[:3], "user")
    text = rendered(rows, "user", "json", {"title": "T", "window": [1, 2]})
    doc = json.loads(text)
    assert doc["by"] == "user" and doc["meta"] == {"title": "T", "window": [1, 2]}
    assert doc["rows"] == json.loads(json.dumps(rows))
    assert doc["totals"] == reff.totals(rows)
    assert text.endswith("}\n") and text.startswith('{\n "by": "user",\n "meta"')  # sorted keys, indent 1


def test_json_renders_what_json_cannot_as_text():
    rows = reff.group(JOBS[:1], "user")
    doc = json.loads(rendered(rows, "user", "json", {"when": SimpleNamespace}))
    assert doc["meta"]["when"] == str(SimpleNamespace)


# --------------------------------------------------------------------------- ssubmit's line


def test_one_line_with_every_part():
    j = job("1", "u", 4, 1800.0, touched=1, idle=3, used=1800.0, peak=71680.0, cap=81920.0, util_pct=25.0)
    j.note = "partial"
    assert reff.one_line(j) == (
        "GPU efficiency: 25.0% of 4 GPU(s), 1/4 touched, 3 idle (<10%), 0.500 of 2.000 GPU-h used, "
        "peak memory 70.0 of 80.0 GiB, partial"
    )


def test_one_line_from_slurms_average_has_no_split_or_memory_fraction():
    j = job("1", "u", 2, 3600.0, used=1800.0, peak=1024.0, util_pct=25.0)
    assert reff.one_line(j) == "GPU efficiency: 25.0% of 2 GPU(s), 0.500 of 2.000 GPU-h used"
    j.mem_capacity_mib = 0.0
    assert reff.one_line(j) == "GPU efficiency: 25.0% of 2 GPU(s), 0.500 of 2.000 GPU-h used"
    j.gpus_touched = 0
    assert reff.one_line(j) == "GPU efficiency: 25.0% of 2 GPU(s), 0/2 touched, 0.500 of 2.000 GPU-h used"


def test_one_line_when_unknown():
    j = job("1", "u", 2, 1800.0, known=0)
    assert reff.one_line(j) == "GPU efficiency: unknown (no measurement); 2 GPU(s), 1.000 GPU-h allocated"
    j.note = "accounting off"
    assert reff.one_line(j) == "GPU efficiency: unknown (accounting off); 2 GPU(s), 1.000 GPU-h allocated"


# --------------------------------------------------------------------------- the live query


def test_sacct_args_for_a_window_and_filters():
    start, end = T0, T0 + 86400
    args = reff.sacct_args((start, end), users={"zed", "amy"}, accounts=["b", "a"], partitions=("q", "p"))
    from slurmkit.report.window import iso_local

    assert args == [
        "-a",
        "--parsable2",
        "--noheader",
        f"--delimiter={SACCT_DELIMITER}",
        "--format=" + ",".join(reff.FIELDS),
        "-S",
        iso_local(start),
        "-E",
        iso_local(end),
        "-u",
        "amy,zed",
        "-A",
        "a,b",
        "-r",
        "p,q",
    ]
    assert reff.sacct_args((start, end)) == args[:9]


def test_sacct_args_for_job_ids_have_no_window():
    args = reff.sacct_args((0, 0), job_ids=["5", "6_1"])
    assert args[5:] == ["-j", "5,6_1"] and "-S" not in args and "-E" not in args


def test_from_sacct_runs_the_query_and_parses_its_rows(monkeypatch):
    seen = []
    tok = summary_token({"n1": {"gpus": {"0": {"u": 40.0, "t": 3600.0, "p": 1}}}})
    stdout = "\n".join(
        [
            line(job="50", tres="gres/gpu=1", comment=tok, sep=SACCT_DELIMITER),
            line(job="51", end=str(T0 + 99), sep=SACCT_DELIMITER),
            "",
        ]
    )

    def fake(query, timeout):
        seen.append((query.args, query.env, timeout))
        return SimpleNamespace(stdout=stdout)

    monkeypatch.setattr(reff, "call_sacct", fake)
    res = reff.from_sacct(["-a"], idle_below=50.0, window=(T0, T0 + 10), timeout=7.5)
    assert seen == [(["-a"], {"SLURM_TIME_FORMAT": "%s"}, 7.5)]
    assert [j.job_id for j in res.jobs] == ["50"]  # 51 ended after the window
    assert (res.jobs[0].util_pct, res.jobs[0].gpus_idle) == (40.0, 1)  # idle below 50 %
    assert res.rows == 2


def test_job_efficiency_asks_for_that_job_only(monkeypatch):
    seen = []

    def fake(query, timeout):
        seen.append((query.args, timeout))
        return SimpleNamespace(
            stdout="\n".join(
                [
                    line(job="60", elapsed="60", sep=SACCT_DELIMITER),
                    line(job="61", sep=SACCT_DELIMITER),
                    line(job="60", elapsed="120", sep=SACCT_DELIMITER),
                ]
            )
        )

    monkeypatch.setattr(reff, "call_sacct", fake)
    j = reff.job_efficiency("60", timeout=3.0)
    assert seen == [(reff.sacct_args((0, 0), job_ids=["60"]), 3.0)]
    assert j.job_id == "60" and j.elapsed_s == 120.0  # the last row of the job (a requeue's)
    assert reff.job_efficiency("62") is None
    assert seen[-1][1] is None


def test_job_efficiency_judges_idle_gpus_by_the_default_threshold(monkeypatch):
    tok = summary_token(
        {"n1": {"gpus": {"0": {"u": 9.9, "t": 3600.0, "p": 1}, "1": {"u": 10.0, "t": 3600.0}}}}
    )
    stdout = line(job="70", comment=tok, sep=SACCT_DELIMITER)
    monkeypatch.setattr(reff, "call_sacct", lambda query, timeout: SimpleNamespace(stdout=stdout))
    j = reff.job_efficiency("70")
    assert (j.gpus_known, j.gpus_idle, j.gpus_touched) == (2, 1, 1)  # 9.9 % is idle, 10 % is not


def test_one_line_hours_are_hours():
    j = job("1", "u", 8, 18000.0, touched=8, idle=0, used=36000.0, util_pct=25.0)
    assert "10.000 of 40.000 GPU-h used" in reff.one_line(j)


# --------------------------------------------------------------------------- saved dumps


def write(tmp_path, text, name="eff.txt"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_from_file_reads_a_dump_with_comments_before_its_header(tmp_path):
    path = write(
        tmp_path, "# saved by hand\n\n" + "|".join(COLS) + "\n" + line(job="80") + "\n1|gres/gpu=1\n"
    )
    res = reff.from_file(path, idle_below=10.0, window=None)
    assert [j.job_id for j in res.jobs] == ["80"]
    assert res.warnings == [f"line 5: wrong field count (expected {len(COLS)})"]  # the file's own line number


def test_from_file_of_an_empty_dump_is_empty(tmp_path):
    res = reff.from_file(write(tmp_path, "\n# nothing\n"), idle_below=10.0, window=None)
    assert (res.jobs, res.rows, res.malformed, res.warnings) == ([], 0, 0, [])


def test_from_file_header_less_with_columns_and_a_delimiter(tmp_path):
    cols = ["AdminComment", "JobID", "State", "AllocTRES", "ElapsedRaw"]
    path = write(tmp_path, ";".join(["", "81", "COMPLETED", "gres/gpu=4", "60"]) + "\n")
    res = reff.from_file(path, idle_below=10.0, window=None, columns=cols, delimiter=";")
    (j,) = res.jobs
    assert (j.job_id, j.gpus, j.elapsed_s, j.note) == ("81", 4, 60.0, "no slurmkit summary")


def test_from_file_without_a_header_names_the_efficiency_command(tmp_path):
    with pytest.raises(UsageError) as exc:
        reff.from_file(write(tmp_path, line() + "\n"), idle_below=10.0, window=None)
    assert "not an sacct --parsable2 header" in str(exc.value)
    assert str(exc.value).endswith(reff.recommended_command())  # the columns this report needs


def test_from_file_missing_columns_are_named_with_the_file(tmp_path):
    path = write(tmp_path, "JobID|State\n1|COMPLETED\n")
    with pytest.raises(UsageError) as exc:
        reff.from_file(path, idle_below=10.0, window=None)
    assert str(exc.value) == (
        f"--sacct-file {path}: missing column(s) AllocTRES, AdminComment; {reff.recommended_command()}"
    )


def test_from_file_trusts_free_text_columns_unless_told_not_to(tmp_path):
    """The report's own default is to trust (the CLI passes --trust-free-text's value)."""
    path = write(tmp_path, "|".join(COLS + ["JobName"]) + "\n" + line(job="82") + "|train\n")
    assert [j.job_id for j in reff.from_file(path, idle_below=10.0, window=None).jobs] == ["82"]
    with pytest.raises(UsageError) as exc:
        reff.from_file(path, idle_below=10.0, window=None, trust_free_text=False)
    assert "JobName" in str(exc.value)


# --------------------------------------------------------------------------- the chart


_FIGURES: list = []  # every _Recorder made, in order (the figure first)


class _Recorder:
    """Stands in for matplotlib's Figure, its canvas and its axes: records the calls."""

    calls: list = []

    def __init__(self, *args, **kw):
        _Recorder.calls.append(("init", args, kw))
        _FIGURES.append(self)

    def __getattr__(self, name):
        def record(*args, **kw):
            _Recorder.calls.append((name, args, kw))
            return self

        return record


@pytest.fixture
def chart_calls(monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.backends.backend_agg as agg
    import matplotlib.figure as mfig

    _Recorder.calls = []
    _FIGURES.clear()
    monkeypatch.setattr(mfig, "Figure", _Recorder)
    monkeypatch.setattr(agg, "FigureCanvasAgg", _Recorder)
    return _Recorder.calls


def _by_name(calls, name):
    return [(a, k) for n, a, k in calls if n == name]


def test_the_chart_draws_allocated_used_and_idle_hours_worst_first(chart_calls, tmp_path):
    rows = reff.group(JOBS, "user")  # alice, bob, carol, -
    reff.write_chart(rows, "user", str(tmp_path / "c.SVG"), top=3)
    (fig_args, fig_kw) = chart_calls[0][1:]
    assert chart_calls[0][0] == "init" and fig_args == ()
    assert fig_kw == {"figsize": (8.0, 2.7), "dpi": 100}  # 0.4 x 3 + 1.5
    assert _by_name(chart_calls, "add_subplot") == [((1, 1, 1), {})]
    bars = _by_name(chart_calls, "barh")
    assert [a for a, _ in bars] == [
        ([0, 1, 2], [1.0, 2.0, 4.0]),  # allocated, the worst at the top
        ([0, 1, 2], [1.0, 1.0, 1.5]),  # used
        ([0, 1, 2], [0.0, 0.0, 1.5]),  # idle GPUs (bob's unknown: 0)
    ]
    assert [k["label"] for _, k in bars] == ["allocated", "used", "idle GPUs"]
    assert [k.get("height", 0.8) for _, k in bars] == [0.8, 0.5, 0.2]  # each inside the one before
    assert _by_name(chart_calls, "set_yticks") == [(([0, 1, 2],), {})]
    assert _by_name(chart_calls, "set_yticklabels")[0][0] == (["carol", "bob", "alice"],)
    assert _by_name(chart_calls, "set_xlabel") == [(("GPU-hours",), {})]
    assert _by_name(chart_calls, "set_title") == [(("GPU efficiency by user (worst first)",), {})]
    assert len(_by_name(chart_calls, "legend")) == 1 and len(_by_name(chart_calls, "tight_layout")) == 1
    assert _by_name(chart_calls, "savefig") == [((str(tmp_path / "c.SVG"),), {"format": "svg"})]


def test_a_small_chart_keeps_its_minimum_height_and_twenty_bars_by_default(chart_calls, tmp_path):
    reff.write_chart(reff.group(JOBS[:1], "user"), "user", str(tmp_path / "c.png"))
    assert chart_calls[0][2]["figsize"] == (8.0, 2.5)  # max(2.5, 0.4 + 1.5)
    assert _by_name(chart_calls, "savefig")[0][1] == {"format": "png"}
    many = [job(str(i), f"u{i:02d}", 1, 3600.0, touched=1, idle=0, used=float(i)) for i in range(25)]
    chart_calls.clear()
    reff.write_chart(reff.group(many, "user"), "user", str(tmp_path / "c.png"))
    assert chart_calls[0][2]["figsize"] == (8.0, 9.5)  # 0.4 x 20 + 1.5
    assert len(_by_name(chart_calls, "set_yticklabels")[0][0][0]) == 20


def test_the_chart_file_name_must_be_png_or_svg(tmp_path):
    for name in ("c.pdf", "c", "c.png.txt"):
        with pytest.raises(UsageError) as exc:
            reff.write_chart([], "user", str(tmp_path / name))
        assert str(exc.value) == f"--plot {tmp_path / name}: the file name must end in .png or .svg"


def test_a_chart_that_cannot_be_saved_is_a_usage_error(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "missing-dir" / "c.png"
    with pytest.raises(UsageError) as exc:
        reff.write_chart(reff.group(JOBS[:1], "user"), "user", str(path))
    assert str(exc.value) == f"--plot {path}: No such file or directory"


def test_every_job_of_a_group_adds_to_each_sum():
    jobs = [
        job("1", "u", 2, 3600.0, known=1, touched=0, idle=1, used=0.0, idle_s=3600.0),
        job("2", "u", 4, 1800.0, known=2, touched=1, idle=1, used=900.0, idle_s=1800.0),
    ]
    (r,) = reff.group(jobs, "user")
    assert (r["gpus"], r["gpus_known"], r["gpus_touched"], r["gpus_idle"]) == (6, 3, 1, 2)
    assert (r["alloc_gpu_h"], r["known_gpu_h"], r["used_gpu_h"], r["idle_gpu_h"], r["unknown_gpu_h"]) == (
        4.0,
        2.0,
        0.25,
        1.5,
        2.0,  # 1 of job 1, 1 of job 2
    )
    assert (r["util_pct"], r["wasted_gpu_h"]) == (12.5, 1.75)


def test_less_than_an_hour_idle_or_wasted_still_ranks_first():
    jobs = [
        job("1", "none-idle", 1, 3600.0, touched=1, idle=0, used=3600.0),
        job("2", "half-idle", 1, 1800.0, touched=0, idle=1, used=1800.0, idle_s=1800.0),
    ]
    assert [r["user"] for r in reff.group(jobs, "user")] == ["half-idle", "none-idle"]
    jobs = [
        job("1", "none-wasted", 1, 3600.0, touched=1, idle=0, used=3600.0),
        job("2", "half-wasted", 1, 3600.0, touched=1, idle=0, used=1800.0),
    ]
    assert [r["user"] for r in reff.group(jobs, "user")] == ["half-wasted", "none-wasted"]


def test_json_keys_are_sorted_inside_rows_too():
    text = rendered(reff.group(JOBS[:1], "user"), "user", "json")
    keys = [k for k in json.loads(text)["rows"][0]]
    assert keys == sorted(keys)


def test_an_empty_report_totals_zero_hours():
    text = rendered([], "user", "table", {})
    assert text.split("\n")[-2].split() == [
        "TOTAL",
        "0",
        "0",
        "0.0000",
        "0.0000",
        "0.0000",
        "0.0000",
        "unknown",
    ]


def test_from_file_applies_the_window(tmp_path):
    path = write(
        tmp_path, "|".join(COLS) + "\n" + line(job="83", end=str(T0 + 5)) + "\n" + line(job="84") + "\n"
    )
    assert [j.job_id for j in reff.from_file(path, idle_below=10.0, window=(T0 + 1, T0 + 10)).jobs] == ["83"]


def test_from_file_refusing_free_text_names_the_file(tmp_path):
    path = write(tmp_path, "|".join(COLS + ["JobName"]) + "\n")
    with pytest.raises(UsageError) as exc:
        reff.from_file(path, idle_below=10.0, window=None, trust_free_text=False)
    assert str(exc.value).startswith(f"--sacct-file {path}: column(s) JobName hold text users write")


def test_a_step_with_only_memory_adds_it_to_another_steps_utilisation():
    rows = [
        line(job="31.0", raw="31.0", ave="gres/gpuutil=30", tres="cpu=1"),
        line(job="31.1", raw="31.1", ave="gres/gpumem=2G", tres="cpu=1"),
        line(job="31"),
    ]
    (job,) = parse(rows).jobs
    assert (job.source, job.util_pct, job.peak_mem_mib) == ("slurm-tres", 30.0, 2048.0)


def test_elapsed_from_start_and_end_when_elapsed_raw_is_empty():
    (job,) = parse([line(elapsed="", start=str(T0 - 90), end=str(T0))]).jobs
    assert job.elapsed_s == 90.0


def test_the_last_column_loses_only_the_line_end():
    cols = [c for c in COLS if c != "NodeList"] + ["NodeList"]
    row = line(nodes="x").split("|")
    del row[COLS.index("NodeList")]
    res = parse(["|".join(row + ["nodeX"]) + "\r\n", "\r\n"], columns=cols)
    assert [j.nodes for j in res.jobs] == ["nodeX"] and res.rows == 1


def test_the_admin_comment_may_hold_the_separator():
    tok = summary_token({"n1": {"gpus": {"0": {"u": 70.0, "t": 3600.0, "p": 1}}}})
    (job,) = parse([line(tres="gres/gpu=1", comment=f"a|b {tok}")]).jobs
    assert (job.source, job.util_pct) == ("slurmkit", 70.0)
    # wherever the column is: the surplus separators are folded back into it, not the last one
    cols = ["AdminComment", "JobID", "State", "AllocTRES", "ElapsedRaw"]
    (job,) = parse([f"a|b {tok}|43|COMPLETED|gres/gpu=1|3600"], columns=cols).jobs
    assert (job.job_id, job.elapsed_s, job.source, job.util_pct) == ("43", 3600.0, "slurmkit", 70.0)


def test_without_a_jobidraw_column_every_job_is_its_own():
    cols = [c for c in COLS if c != "JobIDRaw"]
    rows = []
    for jid in ("41", "42"):
        r = line(job=jid).split("|")
        del r[1]
        rows.append("|".join(r))
    assert [j.job_id for j in parse(rows, columns=cols).jobs] == ["41", "42"]


def test_the_chart_draws_unknown_hours_as_none_and_on_its_own_canvas(chart_calls, tmp_path):
    reff.write_chart(reff.group(JOBS[4:5], "user"), "user", str(tmp_path / "c.png"))  # nothing measured
    assert [a[1] for a, _ in _by_name(chart_calls, "barh")] == [[2.0], [0.0], [0.0]]
    inits = [a for n, a, _ in chart_calls if n == "init"]
    assert len(inits) == 2 and inits[1] == (_FIGURES[0],)  # the canvas is made for the figure


def test_a_chart_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # an import of it raises ImportError
    with pytest.raises(UsageError) as exc:
        reff.write_chart([], "user", str(tmp_path / "c.png"))
    assert str(exc.value) == "--plot needs matplotlib: pip install 'slurmkit[plot]'"
