"""`slurmkit report efficiency` from saved sacct output with AdminComment summaries: the
arithmetic by hand, the ranking (worst offenders first), "unknown" never read as 0,
Slurm's gres/gpuutil as a fallback, formats, the chart and bad input. The live path
(epilog -> AdminComment -> sacct) is tested on the devcluster in
tests/integration/test_efficiency_devcluster.py."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.report import efficiency as reff
from slurmkit.slurm.admincomment import encode

HEADER = "|".join(reff.FIELDS)
CAP = 81559


def gpu(u, t, p=1, m=40000):
    return {"u": u, "t": t, "b": u / 100 * t, "m": m, "c": CAP, "p": p}


def token(job, nodes, missing=()):
    return encode({"v": 1, "job": job, "nodes": nodes, "missing": list(missing)})


def row(job, user, account, gpus, elapsed, comment="", state="COMPLETED", ave="", end="2026-11-10T12:00:00"):
    tres = f"billing=1,cpu=1,gres/gpu={gpus},mem=1000M,node=1" if gpus else "billing=1,cpu=1,mem=1000M,node=1"
    return "|".join(
        [
            job,
            job,
            state,
            tres,
            "2026-11-10T10:00:00",
            end,
            str(elapsed),
            user,
            account,
            "debug",
            "node1",
            ave,
            "",
            comment,
        ]
    )


def step(job, ave):
    return "|".join(
        [
            job,
            job,
            "COMPLETED",
            "cpu=1,gres/gpu=2,mem=1000M,node=1",
            "2026-11-10T10:00:00",
            "2026-11-10T11:00:00",
            "3600",
            "",
            "",
            "",
            "node1",
            ave,
            "",
            "",
        ]
    )


ALL_80 = {"node1": {"acct": "on", "gpus": {str(i): gpu(80.0, 3600.0) for i in range(8)}}}
ONE_OF_8 = {
    "node1": {
        "acct": "on",
        "gpus": {
            "0": gpu(90.0, 7200.0, p=2, m=80000),
            **{str(i): gpu(0.0, 0.0, p=0, m=0) for i in range(1, 8)},
        },
    }
}
OFF = {"node1": {"acct": "off", "gpus": {str(i): {"a": "off", "c": CAP} for i in range(4)}}}
SHORT = {"node1": {"acct": "on", "gpus": {"0": gpu(50.0, 1800.0)}}}

LINES = [
    HEADER,
    row("101", "alice", "research", 8, 3600, token("101", ALL_80)),
    row("102", "bob", "ops", 8, 7200, "site-note " + token("102", ONE_OF_8)),
    row("103", "carol", "research", 4, 1800, token("103", OFF)),
    row("104", "dave", "ops", 2, 3600),
    step("104.0", "cpu=00:00:01,gres/gpumem=2G,gres/gpuutil=50"),
    row("105", "alice", "research", 8, 100, state="RUNNING", end="Unknown"),
    row("106", "alice", "research", 0, 3600, token("106", ALL_80)),
    row("107", "erin", "ops", 1, 3600, "JS1:xyz SK1:bm90IGd6aXA="),
    row("108", "alice", "research", 1, 3600, token("108", SHORT)),
]


@pytest.fixture
def sacct_file(tmp_path):
    path = tmp_path / "eff.txt"
    path.write_text("\n".join(LINES) + "\n")
    return str(path)


def parse():
    return reff.parse(LINES[1:], LINES[0].split("|"), sep="|", idle_below=10.0)


def test_numbers_by_hand():
    res = parse()
    jobs = {j.job_id: j for j in res.jobs}
    assert sorted(jobs) == ["101", "102", "103", "104", "107", "108"]  # running and GPU-less jobs left out
    assert res.skipped_running == 1 and res.bad_comments == 1
    a = jobs["101"]  # 8 GPUs x 1 h x 80 %
    assert a.alloc_gpu_h == 8.0 and a.used_gpu_s / 3600 == pytest.approx(8 * 1.0 * 0.80)
    assert (a.gpus_touched, a.gpus_idle, a.util_pct) == (8, 0, pytest.approx(80.0))
    b = jobs["102"]  # 1 GPU at 90 % for 2 h, 7 untouched
    assert b.used_gpu_s / 3600 == pytest.approx(0.9 * 2.0)
    assert b.idle_gpu_s / 3600 == pytest.approx(7 * 2.0)
    assert (b.gpus_touched, b.gpus_idle) == (1, 7)
    assert b.util_pct == pytest.approx(100 * 1.8 / 16.0)
    assert (b.peak_mem_mib, b.mem_capacity_mib) == (80000, CAP)
    c = jobs["103"]  # accounting off: unknown, not 0
    assert c.util_pct is None and c.gpus_known == 0 and c.unknown_gpu_h == 2.0 and "accounting off" in c.note
    d = jobs["104"]  # Slurm's own gres/gpuutil on the step
    assert d.source == "slurm-tres" and d.util_pct == 50.0 and d.used_gpu_s / 3600 == pytest.approx(1.0)
    assert d.peak_mem_mib == 2048.0
    assert jobs["107"].util_pct is None and "unreadable" in jobs["107"].note
    e = jobs["108"]  # 50 % for half of the job's hour: 25 % over its life
    assert e.used_gpu_s / 3600 == pytest.approx(0.25) and e.util_pct == pytest.approx(25.0)


def test_worst_offenders_first_and_unknown_last():
    rows = reff.group(parse().jobs, "job")
    assert [r["job"] for r in rows] == ["102", "101", "104", "108", "103", "107"]
    by_job = {r["job"]: r for r in rows}
    assert by_job["103"]["used_gpu_h"] is None and by_job["103"]["idle_gpu_h"] is None  # unknown, not 0
    assert by_job["104"]["gpus_touched"] is None and by_job["104"]["idle_gpu_h"] is None  # no per-GPU split
    assert by_job["104"]["used_gpu_h"] == pytest.approx(1.0)
    by_user = {r["user"]: r for r in reff.group(parse().jobs, "user")}
    alice = by_user["alice"]  # 101 + 108
    assert alice["used_gpu_h"] == pytest.approx(6.4 + 0.25) and alice["known_gpu_h"] == 9.0
    assert alice["util_pct"] == pytest.approx(100 * 6.65 / 9)
    assert by_user["carol"]["util_pct"] is None and by_user["carol"]["unknown_gpu_h"] == 2.0
    assert [r["user"] for r in reff.group(parse().jobs, "user")][0] == "bob"


def test_cli_table_json_csv_and_chart(cli, sacct_file, tmp_path):
    res = cli("report", "efficiency", "--sacct-file", sacct_file, "--by", "job")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("GPU efficiency by job")
    first = lines[3].split()
    assert first[:2] == ["1", "102"]
    carol = next(x for x in lines if " 103 " in x)
    assert "unknown" in carol and " 0.0 " not in carol
    assert "job 107" in res.stderr  # the unreadable summary is named
    res = cli("report", "efficiency", "--sacct-file", sacct_file, "--by", "account", "--json")
    data = json.loads(res.stdout)
    ops = next(r for r in data["rows"] if r["account"] == "ops")
    assert ops["idle_gpu_h"] == pytest.approx(14.0) and ops["unknown_gpu_h"] == pytest.approx(1.0)
    assert data["totals"]["alloc_gpu_h"] == pytest.approx(8 + 16 + 2 + 2 + 1 + 1)
    out = cli("report", "efficiency", "--sacct-file", sacct_file, "--by", "user", "--format", "csv").stdout
    got = list(csv.DictReader(io.StringIO(out)))
    assert got[0]["user"] == "bob" and next(r for r in got if r["user"] == "carol")["util_pct"] == ""
    png = tmp_path / "eff.png"
    res = cli("report", "efficiency", "--sacct-file", sacct_file, "--plot", str(png), "--top", "2")
    assert res.exit_code == 0, res.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_live_sacct_command_and_its_failure(cli, monkeypatch):
    from slurmkit.slurm import runner

    seen = []

    def fake(argv, timeout, input, env):
        seen.append((argv, env))
        out = "\n".join(x.replace("|", "\x1f") for x in LINES[1:3])
        return runner.Result(list(argv), 0, out, "", 0.01)

    prev = runner.set_runner(fake)
    try:
        res = cli("report", "efficiency", "--since", "2026-11-01", "--until", "2026-12-01", "--json")
    finally:
        runner.set_runner(prev)
    assert res.exit_code == 0, res.stderr
    argv, env = seen[0]
    assert env["SLURM_TIME_FORMAT"] == "%s" and "-a" in argv
    assert argv[argv.index("-S") + 1].startswith("2026-11")
    assert any(a.startswith("--format=") and a.endswith("AdminComment") for a in argv)
    assert [r["user"] for r in json.loads(res.stdout)["rows"]] == ["bob", "alice"]
    prev = runner.set_runner(lambda argv, t, i, e: runner.Result(list(argv), 1, "", "slurmdbd down", 0.01))
    try:
        res = cli("report", "efficiency", "--last", "1d")
    finally:
        runner.set_runner(prev)
    assert res.exit_code == 3 and "slurmdbd down" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "args", [("--idle-below", "nan"), ("--idle-below", "101"), ("--top", "-1"), ("--by", "gpu")]
)
def test_bad_options_are_usage_errors(cli, sacct_file, args):
    res = cli("report", "efficiency", "--sacct-file", sacct_file, *args)
    assert res.exit_code == 2 and "Traceback" not in res.stderr


def test_missing_admin_comment_column_names_it(cli, tmp_path):
    path = tmp_path / "old.txt"
    path.write_text(
        "JobID|State|AllocTRES|Start|End\n1|COMPLETED|gres/gpu=1|2026-11-10T10:00:00|2026-11-10T11:00:00\n"
    )
    res = cli("report", "efficiency", "--sacct-file", str(path))
    assert res.exit_code == 2 and "AdminComment" in res.stderr


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=120))
def test_hostile_admin_comment_text_never_breaks_the_parser(text):
    res = reff.parse([row("1", "u", "a", 2, 60, text)], HEADER.split("|"), sep="|", idle_below=10.0)
    assert len(res.jobs) == 1 and res.jobs[0].gpus == 2


def test_docs_sample_is_what_the_tool_prints(cli, sacct_file):
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "report.md").read_text()
    res = cli("report", "efficiency", "--sacct-file", sacct_file, "--by", "job")
    assert res.exit_code == 0
    assert res.stdout.strip() in doc, "docs/report.md is out of date; paste the new output"


@pytest.mark.parametrize("state", ["STAGE_OUT", "SIGNALING", "STOPPED", "REQUEUE_HOLD", "SPECIAL_EXIT"])
def test_a_job_slurm_still_holds_is_not_reported_as_ended(state):
    """One state set (slurmkit.slurm.states): before, the efficiency reader had its own, in which
    these states meant "ended" (a job without its summary yet was reported as unknown)."""
    lines = [row("301", "alice", "research", 2, 3600, state=state, end="Unknown")]
    res = reff.parse(lines, HEADER.split("|"), sep="|", idle_below=10.0)
    assert res.skipped_running == 1 and res.jobs == [] and res.malformed == 0


def test_efficiency_rows_with_a_bad_job_id_are_malformed():
    lines = [row("12x", "alice", "research", 2, 3600), row("302", "bob", "ops", 2, 3600)]
    bad = "|".join(["303", "304"] + lines[1].split("|")[2:])  # JobIDRaw of another job
    res = reff.parse([*lines, bad], HEADER.split("|"), sep="|", idle_below=10.0)
    assert [j.job_id for j in res.jobs] == ["302"] and res.malformed == 2
    assert res.warnings == ["line 1: bad JobID or JobIDRaw", "line 3: bad JobID or JobIDRaw"]


def test_live_efficiency_gives_the_slurmdbd_hint(cli):
    """One sacct caller: the efficiency report says what the usage report says when slurmdbd is down."""
    from slurmkit.slurm import runner

    err = "sacct: error: slurmdbd: Connection refused"
    prev = runner.set_runner(lambda argv, t, i, e: runner.Result(list(argv), 1, "", err, 0.01))
    try:
        res = cli("report", "efficiency", "--last", "1d")
    finally:
        runner.set_runner(prev)
    assert res.exit_code == 3 and "is slurmdbd running and reachable?" in res.stderr


def test_efficiency_reads_dumps_as_the_usage_report_does(cli, tmp_path):
    """One dump reader: the efficiency report ignored --sacct-columns and --sacct-delimiter and
    misread --parsable output (a delimiter after the last field); it reads them as usage does."""
    body = [LINES[1], LINES[2]]
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join([HEADER, *body]) + "\n")
    expected = json.loads(cli("report", "efficiency", "--sacct-file", str(plain), "--json").stdout)["rows"]
    assert [r["user"] for r in expected] == ["bob", "alice"]
    snowman = tmp_path / "snowman.txt"  # --noheader --delimiter=☃, columns given
    snowman.write_text("\n".join(line.replace("|", "☃") for line in body) + "\n")
    res = cli(
        "report", "efficiency", "--sacct-file", str(snowman), "--sacct-delimiter", "☃",
        "--sacct-columns", ",".join(reff.FIELDS), "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["rows"] == expected
    parsable = tmp_path / "parsable.txt"  # --parsable: a delimiter after the last field
    parsable.write_text("\n".join(line + "|" for line in [HEADER, *body]) + "\n")
    res = cli("report", "efficiency", "--sacct-file", str(parsable), "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["rows"] == expected


def test_efficiency_times_are_sacct_times_not_options():
    """One time parser: `now` or a bare date in the data is not an sacct time (the efficiency
    reader used the --since/--until parser, which takes both)."""
    lines = [
        row("401", "alice", "research", 2, 3600, end="now"),
        row("402", "bob", "ops", 2, 3600, end="2026-11-10"),
        row("403", "carol", "ops", 2, 3600),
    ]
    res = reff.parse(lines, HEADER.split("|"), sep="|", idle_below=10.0, window=(1793491200, 1796083200))
    assert [j.job_id for j in res.jobs] == ["403"] and res.malformed == 2
    assert res.warnings == ["line 1: bad End time", "line 2: bad End time"]


def test_efficiency_refuses_a_dump_with_free_text(cli, tmp_path):
    dump = tmp_path / "named.txt"
    dump.write_text(HEADER + "|JobName\n" + LINES[1] + "|innocent\n")
    res = cli("report", "efficiency", "--sacct-file", str(dump), "--json")
    assert res.exit_code == 2 and "JobName" in res.stderr
    res = cli("report", "efficiency", "--sacct-file", str(dump), "--trust-free-text", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["rows"][0]["user"] == "alice"


@pytest.mark.parametrize("by", ["job", "user"])
def test_each_unreadable_summary_is_warned_once(cli, sacct_file, by):
    """The efficiency report printed each parse warning twice; once now, whatever the grouping."""
    res = cli("report", "efficiency", "--sacct-file", sacct_file, "--by", by)
    assert res.exit_code == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("slurmkit: warning: ")]
    assert [w for w in warnings if "job 107" in w] == [w for w in warnings if "job 107" in w][:1] != []
    assert len(warnings) == len(set(warnings)), warnings
