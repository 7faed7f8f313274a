"""`slurmkit report` on a real, anonymised sacct dump from another project
(tests/data/real/hb-jobinfo-sacct.txt, see the README there): no header, 37 columns
in that project's order, `--parsable` (a delimiter after the last field) and `☃` as
the delimiter. Every expected number below is worked out by hand from the rules in
docs/report.md; the arithmetic is in the comments.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

DUMP = str(Path(__file__).resolve().parents[1] / "data" / "real" / "hb-jobinfo-sacct.txt")
# The --format list the dump was made with (hb-jobinfo test/data/README.md).
COLUMNS = (
    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
    "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
    "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
    "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment"
)
# Pinned "now": the two RUNNING GPU jobs count up to it. Local time of the cluster.
NOW = "2024-04-19T12:00:00"
ARGS = (
    "--trust-free-text",
    "--sacct-file",
    DUMP,
    "--sacct-columns",
    COLUMNS,
    "--sacct-delimiter",
    "☃",
    "--month",
    "2024-04",
    "--now",
    NOW,
    "--no-health-log",
    "--json",
)

# The job rows with a gres/gpu key in AllocTRES (every other job row has none: 0 GPUs).
# GPU-seconds = GPUs x (End - Start); all in April 2024 (CEST, no DST change inside).
#   line   9  7965768  user427 CANCELLED 1 v100  04-04 21:45:17 -> 04-05 13:13:39
#                      2:14:43 to midnight (8,083 s) + 13:13:39 (47,619 s) = 55,702 s -> 55,702
#   line  12  7946767  user420 COMPLETED 1 v100  04-05 00:18:37 -> 11:42:00 = 11:23:23 = 41,003
#   line  15  7939708  user422 FAILED    1 a100  20:32:21 -> 20:32:25 = 4 s -> 4
#   line 209  8150389  user498 CANCELLED 2 a100  04-13 20:33:32 -> 04-16 17:42:48
#                      3 days (259,200 s) - 2:50:44 (10,244 s) = 248,956 s x 2 = 497,912
#   line 222  8298012  user47  RUNNING   1 v100  04-19 06:37:48 -> now 12:00:00 = 5:22:12 = 19,332
#   line 225  8202099  user490 RUNNING   1 a100  04-17 22:53:53 -> 04-19 12:00:00
#                      1 day + 13:06:07 = 86,400 + 47,167 = 133,567
#   line 228  8069225  user28  COMPLETED 1 v100  02:32:17 -> 11:18:06 = 8:45:49 = 31,549
#   line 231  7971484  user46  COMPLETED 4 a100  16:15:39 -> 16:19:32 = 233 s x 4 = 932 (2 nodes)
#   line 235  7961058  user4981 COMPLETED 2 a100 18:45:47 -> 19:26:02 = 2,415 s x 2 = 4,830
# Total 784,831 GPU-s = 218.008611 GPU-hours;
# v100: 55,702 + 41,003 + 19,332 + 31,549 = 147,586 -> 40.996111;
# a100: 4 + 497,912 + 133,567 + 932 + 4,830 = 637,245 -> 177.0125.
# By final state: CANCELLED 55,702 + 497,912 = 553,614 -> 153.781667; COMPLETED 41,003 + 31,549 + 932
# + 4,830 = 78,314 -> 21.753889; FAILED 4 -> 0.001111; RUNNING 19,332 + 133,567 = 152,899 -> 42.471944.
#
# Jobs (distinct JobID: the dump has no JobIDRaw) that ran inside April: job rows at lines 9, 12, 15,
# 18, 22, 25, 29, 179, 182, 185, 188, 191, 195, 199, 202, 209, 212, 217, 222, 225, 228, 231, 235, 238
# = 24, one attempt each. Not started (Start None/Unknown): lines 3, 5, 79 (NODE_FAIL with Start=None),
# 205-208, 216, 220, 221 = 10. Lost: the April TIMEOUT jobs (8180204, 8181476_31, 8182578) hold no GPU,
# so 0 lost GPU-hours.


@pytest.fixture
def amsterdam(monkeypatch):
    """The dump's times are the cluster's local time (Europe/Amsterdam)."""
    from slurmkit.report import sacct

    monkeypatch.setenv("TZ", "Europe/Amsterdam")
    time.tzset()
    sacct.clear_time_caches()
    yield
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    sacct.clear_time_caches()


def _report(cli, *extra):
    res = cli("report", *ARGS, *extra)
    assert res.exit_code == 0, res.stderr
    assert res.stderr == ""  # no malformed row: the trailing delimiter and the ☃ are understood
    return json.loads(res.stdout)


def test_real_dump_totals_by_gpu_type(cli, amsterdam):
    data = _report(cli, "--by", "gpu_type")
    rows = {r["gpu_type"]: r for r in data["rows"]}
    assert rows["v100"]["gpu_hours"] == pytest.approx(40.996111, abs=1e-6)
    assert rows["a100"]["gpu_hours"] == pytest.approx(177.0125, abs=1e-6)
    assert rows["none"]["gpu_hours"] == 0.0
    assert (rows["v100"]["jobs"], rows["a100"]["jobs"], rows["none"]["jobs"]) == (4, 5, 15)
    t = data["totals"]
    assert t["gpu_hours"] == pytest.approx(218.008611, abs=1e-6)
    assert (t["jobs"], t["attempts"]) == (24, 24)
    assert t["gpu_hours_by_state"] == pytest.approx(
        {
            "CANCELLED": 153.781667,
            "COMPLETED": 21.753889,
            "FAILED": 0.001111,
            "RUNNING": 42.471944,
            "TIMEOUT": 0.0,
        },
        abs=1e-6,
    )
    assert t["lost_gpu_hours"] == 0.0
    p = data["meta"]["parse"]
    assert (p["rows"], p["not_started"], p["malformed"]) == (242, 10, 0)


def test_real_dump_by_user(cli, amsterdam):
    rows = {r["user"]: r["gpu_hours"] for r in _report(cli, "--by", "user")["rows"] if r["gpu_hours"]}
    # one GPU job per user, from the table above
    assert rows == pytest.approx(
        {
            "user498": 138.308889,
            "user490": 37.101944,
            "user427": 15.472778,
            "user420": 11.389722,
            "user28": 8.763611,
            "user47": 5.37,
            "user4981": 1.341667,
            "user46": 0.258889,
            "user422": 0.001111,
        },
        abs=1e-6,
    )


def test_real_dump_day_split(cli, amsterdam):
    rows = {r["day"]: r["gpu_hours"] for r in _report(cli, "--by", "day")["rows"]}
    # Job 7965768 crosses midnight: 8,083 s on 04-04 -> 2.245278.
    # 04-05: its 47,619 s + 7946767 41,003 s + 7971484 932 GPU-s = 89,554 -> 24.876111.
    # Job 8150389 (2 GPUs): 04-13 20:33:32 -> 24:00 = 12,388 s x 2 = 24,776 -> 6.882222; 04-14: 48.
    assert rows["2024-04-04"] == pytest.approx(2.245278, abs=1e-6)
    assert rows["2024-04-05"] == pytest.approx(24.876111, abs=1e-6)
    assert rows["2024-04-13"] == pytest.approx(6.882222, abs=1e-6)
    assert rows["2024-04-14"] == pytest.approx(48.0, abs=1e-6)


def test_real_dump_node_split(cli, amsterdam):
    rows = {r["node"]: r["gpu_hours"] for r in _report(cli, "--by", "node")["rows"]}
    # a100gpu2: 7939708 (0.001111) + half of 7971484's 932 GPU-s on a100gpu[2,4] (466 s) + 7961058 (4,830)
    #         = 4 + 466 + 4,830 = 5,300 GPU-s -> 1.472222; a100gpu4: 466 -> 0.129444
    assert rows["a100gpu2"] == pytest.approx(1.472222, abs=1e-6)
    assert rows["a100gpu4"] == pytest.approx(0.129444, abs=1e-6)
    # a100gpu3: 8150389 (497,912) + 8202099 (133,567) = 631,479 -> 175.410833
    assert rows["a100gpu3"] == pytest.approx(175.410833, abs=1e-6)


def test_headerless_dump_without_columns_is_one_line_error(cli):
    res = cli("report", "--trust-free-text", "--sacct-file", DUMP, "--now", NOW)
    assert res.exit_code == 2
    assert "header" in res.stderr and "\n" not in res.stderr.strip()


def test_bad_column_list_is_usage_error(cli):
    res = cli(
        "report", "--trust-free-text", "--sacct-file", DUMP, "--sacct-columns", "JobName,User", "--now", NOW
    )
    assert res.exit_code == 2 and "JobID" in res.stderr


@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_real_dump_capacity(cli, amsterdam, engine):
    """capacity over the real dump: 784,831 GPU-s used (above) = 218.009 GPU-hours, of 100 GPUs
    from April 1 00:00 to the pinned now, April 19 12:00 (18.5 days = 444 h): 44,400 GPU-hours,
    0.49 %. Both engines read it."""
    if engine == "duckdb":
        pytest.importorskip("duckdb")
    args = [a for a in ARGS if a != "--no-health-log"]  # (capacity joins no health log)
    res = cli("report", "capacity", *args, "--gpus", "100", "--engine", engine)
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["meta"]["engine"]["name"] == engine
    assert data["totals"] == {
        "group": "TOTAL",
        "gpus": 100,
        "available_gpu_hours": 44400.0,
        "used_gpu_hours": 218.009,
        "used_pct": 0.49,
    }
