"""`slurmkit report` end to end (in-process, real entry point): formats, exit codes,
--show-command, --plot, capacity and build-vs-rent. sacct/sinfo are faked only here,
through the shared runner, to test parsing and error paths; the live cluster is
exercised in tests/integration/test_report_devcluster.py."""

from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path

import pytest

from slurmkit.errors import CommandNotFound
from slurmkit.slurm import runner

BVR = str(Path(__file__).resolve().parents[2] / "etc" / "build-vs-rent.yaml")
NOV = ("--since", "2026-11-01", "--until", "2026-12-01", "--now", "2026-12-01T01:30:00")


@pytest.fixture
def fake_runner():
    """Install a fake process runner; ``answers`` maps a binary's basename to a
    function (argv, env) -> Result."""
    answers = {}
    calls = []

    def fake(argv, timeout, input, env):
        import os

        calls.append((list(argv), dict(env or {})))
        fn = answers.get(os.path.basename(argv[0]))
        if fn is None:
            raise AssertionError(f"unexpected command {argv}")
        return fn(argv, env)

    previous = runner.set_runner(fake)
    yield answers, calls
    runner.set_runner(previous)


def ok(stdout="", stderr="", rc=0):
    return lambda argv, env: runner.Result(list(argv), rc, stdout, stderr, 0.01)


def test_json_matches_hand_totals(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "account,user",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    got = {(r["account"], r["user"]): r["gpu_hours"] for r in data["rows"]}
    assert got == {("research", "alice"): 21.0, ("ops", "bob"): 36.0, ("research", "bob"): 5.0}
    assert data["totals"]["gpu_hours"] == 62.0 and data["totals"]["jobs"] == 15
    assert data["meta"]["window"]["start_iso"] == "2026-11-01T00:00:00"
    assert data["meta"]["parse"]["step_rows"] == 8
    assert res.stderr == ""


def test_month_option_as_written(cli, fixture_path):
    res = cli(
        "report",
        "--month",
        "2026-11",
        "--by",
        "account,user",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        "--now",
        "2026-12-01T01:30:00",
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["gpu_hours"] == 62.0


def test_plain_table_when_not_a_tty(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "user",
        "--price",
        "2.5",
    )
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[0].startswith("GPU-hours by user")
    assert lines[1].split()[:4] == ["user", "rank", "gpu_hours", "share_%"]
    assert "cost_USD" in lines[1]
    bob = next(line for line in lines if line.startswith("bob"))
    assert bob.split()[1:3] == ["1", "41.00"]
    total = lines[-1].split()
    assert total[0] == "TOTAL" and total[1] == "62.00" and total[-1] == "155.00"  # 62 x 2.50
    assert "\x1b[" not in res.stdout  # no colour codes


def test_csv(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "gpu_type",
        "--format",
        "csv",
    )
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert {r["gpu_type"]: float(r["gpu_hours"]) for r in rows} == {
        "h100": 57.0,
        "a100": 3.0,
        "untyped": 2.0,
        "none": 0.0,
    }
    assert "TOTAL" not in res.stdout


def test_markdown_states_view(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "user",
        "--format",
        "markdown",
        "--view",
        "states",
    )
    lines = res.stdout.splitlines()
    assert lines[0].startswith("| user | gpu_hours |") and "COMPLETED" in lines[0] and "NODE_FAIL" in lines[0]
    assert lines[1].startswith("|---|---:|")
    assert lines[-1].startswith("| **TOTAL** | **62.00** |")


def test_lost_subcommand(cli, fixture_path):
    res = cli(
        "report",
        "lost",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "user",
        "--json",
    )
    data = json.loads(res.stdout)
    assert data["totals"]["lost_gpu_hours"] == 9.0
    assert data["totals"]["lost_by_cause"] == {"NODE_FAIL": 4.0, "REQUEUED": 1.0, "TIMEOUT": 4.0}
    table = cli(
        "report", "lost", "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), *NOV, "--by", "user"
    ).stdout
    header = table.splitlines()[1].split()
    assert header[:4] == ["user", "gpu_hours", "lost_gpu_hours", "lost_%"] and "NODE_FAIL" in header


def test_malformed_rows_warn_but_do_not_abort(cli, fixture_path):
    res = cli(
        "report", "--trust-free-text", "--sacct-file", fixture_path("malformed.txt"), "--by", "user", "--json"
    )
    assert res.exit_code == 0
    assert json.loads(res.stdout)["totals"]["gpu_hours"] == 4.0
    assert "skipped 7 malformed row(s) at line(s) 16, 17, 18, 19, 20, 21, 23" in res.stderr


def test_no_jobs_in_window(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        "--since",
        "2025-01-01",
        "--until",
        "2025-02-01",
    )
    assert res.exit_code == 0 and res.stdout == "" and "no jobs in window" in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--month", "2026-13"), "--month '2026-13'"),
        (("--month", "2026-11", "--last", "7d"), "cannot be combined"),
        (("--last", "7x"), "--last '7x'"),
        (("--since", "2026-11-05", "--until", "2026-11-01"), "window is empty"),
        (("--by", "qos"), "unknown grouping 'qos'"),
        (("--price", "cheap"), "--price 'cheap'"),
        (
            ("--trust-free-text", "--sacct-file", "/nonexistent/file.txt"),
            "--sacct-file /nonexistent/file.txt",
        ),
        (("--plot", "chart.gif"), "must end in .png or .svg"),
    ],
)
def test_usage_errors_exit_2(cli, fixture_path, args, message):
    base = () if "--sacct-file" in args else ("--trust-free-text", "--sacct-file", fixture_path("basic.txt"))
    res = cli("report", *base, *args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_missing_columns_exit_2_with_command(cli, tmp_path):
    f = tmp_path / "few.txt"
    f.write_text("JobID|State|AllocTRES|Start|End\n1|COMPLETED|gres/gpu=1|1|2\n")
    res = cli("report", "--trust-free-text", "--sacct-file", str(f), "--by", "account")
    assert (
        res.exit_code == 2 and "missing column(s) Account" in res.stderr and "--format=JobID," in res.stderr
    )


def test_show_command(cli):
    res = cli("report", "--month", "2026-11", "--by", "account,user", "--user", "alice", "--show-command")
    assert res.exit_code == 0
    line = res.stdout.strip()
    assert line.startswith("SLURM_TIME_FORMAT=%s ") and "sacct -a -D -T -S 2026-11-01T00:00:00 " in line
    assert "-E 2026-12-01T00:00:00" in line and "-u alice" in line


def test_live_sacct_path_uses_epoch_times(cli, fake_runner):
    answers, calls = fake_runner
    sep = "\x1f"
    row = sep.join(
        [
            "9",
            "9",
            "COMPLETED",
            "billing=1,gres/gpu:h100=2,gres/gpu=2,node=1",
            "1793620000",
            "1793620000",
            "1793623600",
            "3600",
            "alice",
            "research",
            "debug",
            "node1",
            "None",
            "x|y",
        ]
    )
    answers["sacct"] = ok(row + "\n" + row.replace("9", "9.batch", 1) + "\n")
    res = cli("report", *NOV, "--by", "user", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["gpu_hours"] == 2.0
    argv, env = calls[0]
    assert env["SLURM_TIME_FORMAT"] == "%s" and "-D" in argv and "-T" in argv


def test_sacct_missing_exit_3(cli, fake_runner):
    answers, _ = fake_runner

    def missing(argv, env):
        raise CommandNotFound(argv, f"{argv[0]}: command not found (is it installed and on PATH?)")

    answers["sacct"] = missing
    res = cli("report", *NOV)
    assert res.exit_code == 3 and "command not found" in res.stderr and "Traceback" not in res.stderr


def test_slurmdbd_down_exit_3(cli, fake_runner):
    answers, _ = fake_runner
    answers["sacct"] = ok("", "sacct: error: Problem talking to the database: Connection refused", rc=1)
    res = cli("report", *NOV)
    assert res.exit_code == 3
    assert "Connection refused" in res.stderr and "slurmdbd" in res.stderr


def test_health_log_joined_from_config_log_dir(cli, fixture_path, site_config):
    import time

    log_dir = site_config.parent / "log"
    drain = time.mktime((2026, 11, 3, 12, 0, 0, 0, 0, -1))
    (log_dir / "health.jsonl").write_text(
        json.dumps({"node": "node2", "timestamp": drain, "status": "fail", "code": "XID_79", "check": "xid"})
        + "\n"
    )
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "user",
        "--json",
    )
    data = json.loads(res.stdout)
    # job 101 (node[1-2], 16 GPUs, 10:00-11:00 on 11-03) ran on node2 within 6 h before 12:00
    assert data["meta"]["health_log"]["joined"] and data["totals"]["suspect_gpu_hours"] == 16.0
    off = json.loads(
        cli(
            "report",
            "--trust-free-text",
            "--sacct-file",
            fixture_path("basic.txt"),
            *NOV,
            "--no-health-log",
            "--json",
        ).stdout
    )
    assert "suspect_gpu_hours" not in off["totals"]


# --------------------------------------------------------------------------- plot


def test_plot_png_is_valid_with_title_and_axes(cli, fixture_path, tmp_path):
    out = tmp_path / "usage.png"
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "account,user",
        "--plot",
        str(out),
    )
    assert res.exit_code == 0, res.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height == 500 and len(data) > 10_000


def test_plot_figure_content(fixture_path):
    from slurmkit.report import sacct
    from slurmkit.report.aggregate import reference_aggregate
    from slurmkit.report.plot import build_figure
    from slurmkit.report.window import resolve_window

    w = resolve_window(since="2026-11-01", until="2026-12-01")
    attempts, _, _ = sacct.read_sacct_file(fixture_path("basic.txt"), window=w, now=1796095800)
    rep = reference_aggregate(attempts, ["account", "user"], window_start=w.start)
    rep.meta = {"window": w.to_dict()}
    fig = build_figure(rep)
    (ax,) = fig.axes
    assert ax.get_title() == f"GPU-hours by account, user ({w.label})"
    assert ax.get_ylabel() == "GPU-hours" and ax.get_xlabel() == "account / user"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ops / bob", "research / alice", "research / bob"]
    # stacked bars: the heights per x position add up to the group's GPU-hours
    heights = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2)
        heights[x] = heights.get(x, 0.0) + patch.get_height()
    assert [round(heights[i], 6) for i in range(3)] == [36.0, 21.0, 5.0]
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"COMPLETED", "NODE_FAIL", "TIMEOUT"}


def test_plot_svg(cli, fixture_path, tmp_path):
    out = tmp_path / "days.svg"
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "day",
        "--plot",
        str(out),
    )
    assert res.exit_code == 0
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text


# --------------------------------------------------------------------------- capacity

SINFO = (
    "node1|idle|gpu:h100:8(S:0-1)|debug*|64|512000|none\n"
    "node1|idle|gpu:h100:8(S:0-1)|sweep|64|512000|none\n"
    "node2|mixed|gpu:h100:8(S:0-1)|debug*|64|512000|none\n"
    "cpu1|idle|(null)|debug*|64|512000|none\n"
)


def test_capacity_from_sinfo(cli, fixture_path, fake_runner):
    answers, _ = fake_runner
    answers["sinfo"] = ok(SINFO)
    res = cli(
        "report", "capacity", "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), *NOV, "--json"
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    # 16 GPUs x 30 days x 24 h = 11,520 GPU-hours available; 62 used
    assert data["totals"]["gpus"] == 16 and data["totals"]["available_gpu_hours"] == 11520.0
    assert data["totals"]["used_gpu_hours"] == 62.0
    assert data["totals"]["used_pct"] == pytest.approx(100 * 62 / 11520, abs=0.01)
    by_part = json.loads(
        cli(
            "report",
            "capacity",
            "--trust-free-text",
            "--sacct-file",
            fixture_path("basic.txt"),
            *NOV,
            "--by",
            "partition",
            "--json",
        ).stdout
    )
    parts = {r["group"]: r for r in by_part["rows"]}
    assert (
        parts["debug"]["gpus"] == 16
        and parts["sweep"]["gpus"] == 8
        and parts["debug"]["used_gpu_hours"] == 62.0
    )


def test_capacity_gpus_override_and_table(cli, fixture_path):
    res = cli(
        "report",
        "capacity",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--gpus",
        "4",
    )
    assert res.exit_code == 0
    last = res.stdout.splitlines()[-1].split()
    assert last[:4] == ["TOTAL", "4", "2,880.00", "62.00"]


@pytest.mark.parametrize("by", ["total", "partition", "gpu_type"])
def test_capacity_from_the_archive_equals_capacity_from_the_file(
    cli, fixture_path, fake_runner, tmp_path, by
):
    """The used GPU-hours are the same from the file and the archive, by either engine."""
    pytest.importorskip("duckdb")
    answers, _ = fake_runner
    answers["sinfo"] = ok(SINFO)
    dump = fixture_path("basic.txt")
    arch = str(tmp_path / "arch")
    assert (
        cli("report", "ingest", "--archive", arch, "--trust-free-text", "--sacct-file", dump).exit_code == 0
    )
    args = ["report", "capacity", *NOV, "--by", by, "--json"]
    sources = {  # (arguments, meta.jobs, meta.engine.name)
        "file": (["--trust-free-text", "--sacct-file", dump], dump, "python"),
        "file, duckdb": (["--trust-free-text", "--sacct-file", dump, "--engine", "duckdb"], dump, "duckdb"),
        "archive": (["--archive", arch], "archive " + arch, "duckdb"),
        "archive, python": (["--archive", arch, "--engine", "python"], "archive " + arch, "python"),
    }
    got = {}
    for name, (source, jobs, engine) in sources.items():
        res = cli(*args, *source)
        assert res.exit_code == 0, res.stderr
        got[name] = data = json.loads(res.stdout)
        assert data["meta"].pop("jobs") == jobs
        assert data["meta"].pop("engine")["name"] == engine, name
    assert got["file, duckdb"] == got["archive"] == got["archive, python"] == got["file"]
    assert got["archive"]["totals"]["used_gpu_hours"] == 62.0  # as test_capacity_from_sinfo
    two = cli(*args, "--archive", arch, "--trust-free-text", "--sacct-file", dump)
    assert two.exit_code == 2 and "two sources" in two.stderr


def test_capacity_needs_bounded_window(cli, fixture_path):
    res = cli(
        "report", "capacity", "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), "--gpus", "4"
    )
    assert res.exit_code == 2 and "bounded window" in res.stderr


def test_gres_parsing():
    from slurmkit.report.cost import gpus_from_gres

    assert gpus_from_gres("gpu:h100:8(S:0-1)") == {"h100": 8}
    assert gpus_from_gres("gpu:8") == {"untyped": 8}
    assert gpus_from_gres("gpu:h100:4,gpu:a100:4(S:1)") == {"h100": 4, "a100": 4}
    assert gpus_from_gres("(null)") == {} and gpus_from_gres("shard:4,gpu:h100:2") == {"h100": 2}


# --------------------------------------------------------------------------- build vs rent


def test_build_vs_rent_example(cli):
    res = cli("report", "build-vs-rent", "--config", BVR, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    # 883,000 / (128 x 2.50 x 730 - (10,800 + 2,000 + 15,000)) = 883,000 / 205,800
    assert data["rent_per_month"] == 233600.0 and data["own_per_month"] == 27800.0
    assert data["break_even_months"] == pytest.approx(4.29, abs=0.005)
    table = cli("report", "build-vs-rent", "--config", BVR).stdout
    assert "break-even" in table and "4.29 months" in table


def test_build_vs_rent_flags_and_never(cli):
    res = cli(
        "report",
        "build-vs-rent",
        "--hardware",
        "100000",
        "--gpus",
        "8",
        "--rent",
        "0.5",
        "--power",
        "5000",
        "--json",
    )
    data = json.loads(res.stdout)
    # rent 8 x 0.5 x 730 = 2,920 < 5,000 own: never pays back
    assert data["break_even_months"] is None
    half = json.loads(
        cli("report", "build-vs-rent", "--config", BVR, "--utilization", "0.5", "--json").stdout
    )
    assert half["break_even_months"] == pytest.approx(883000 / (116800 - 27800), abs=0.01)


def test_build_vs_rent_errors(cli, tmp_path):
    assert cli("report", "build-vs-rent").exit_code == 2
    bad = tmp_path / "b.yaml"
    bad.write_text("hardware: 1\ngpus: 1\nrent_per_gpu_hour: 1\nelectricity: 5\n")
    res = cli("report", "build-vs-rent", "--config", str(bad))
    assert res.exit_code == 2 and "unknown key 'electricity'" in res.stderr and "b.yaml:4" in res.stderr


def test_options_before_the_lost_subcommand_apply(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        *NOV,
        "--by",
        "account",
        "lost",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["by"] == ["account"] and data["totals"]["lost_gpu_hours"] == 9.0


def test_report_does_not_import_matplotlib_unless_plotting(fixture_path, site_config):
    import subprocess
    import sys

    code = (
        "import sys, runpy\n"
        f"sys.argv = ['slurmkit', 'report', '--trust-free-text', '--sacct-file', {fixture_path('basic.txt')!r}, '--json']\n"
        "try:\n    runpy.run_module('slurmkit.cli.main', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('HEAVY:' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('matplotlib', 'pandas', 'torch', 'numpy'))))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "HEAVY:"


def test_rich_table_on_a_terminal(fixture_path):
    """On a TTY the table is drawn by rich; the numbers are the same."""
    from slurmkit.report import sacct
    from slurmkit.report.aggregate import reference_aggregate
    from slurmkit.report.render import render_table
    from slurmkit.report.window import resolve_window

    w = resolve_window(since="2026-11-01", until="2026-12-01")
    attempts, _, _ = sacct.read_sacct_file(fixture_path("basic.txt"), window=w, now=1796095800)
    rep = reference_aggregate(attempts, ["user"], window_start=w.start)
    rep.meta = {"title": "GPU-hours by user"}
    buf = io.StringIO()
    render_table(rep, "usage", buf, color=True)
    text = buf.getvalue()
    assert "GPU-hours by user" in text and "41.00" in text and "62.00" in text and "TOTAL" in text


def test_sacct_file_from_stdin(cli, fixture_path, monkeypatch):
    import subprocess
    import sys

    text = open(fixture_path("basic.txt")).read()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurmkit.cli.main",
            "report",
            "--trust-free-text",
            "--sacct-file",
            "-",
            *NOV,
            "--json",
        ],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["gpu_hours"] == 62.0


def test_the_cli_reaches_the_pipeline_only_through_the_source_layer():
    """cli/report.py parses options and prints (issue 26 item 4): of the report package it
    imports the source layer, the renderers and charts, and build-vs-rent's calculator; no
    reader, engine, archive or aggregation."""
    import ast
    from pathlib import Path

    import slurmkit.cli.report as mod

    allowed = {
        "slurmkit.report": {"source", "DEFAULT_IDLE_BELOW", "EFFICIENCY_BY", "FORMATS", "VIEWS"},
        "slurmkit.report.source": {"Dump", "gc_paused"},
        "slurmkit.report.render": {"render"},
        "slurmkit.report.plot": {"write_plot"},
        "slurmkit.report.table": {"write_rows"},
        "slurmkit.report.capacity": {"render_capacity", "render_build_vs_rent"},
        "slurmkit.report.cost": {"build_vs_rent_from_mapping"},
        "slurmkit.report.efficiency": {"render", "write_chart"},
    }
    tree = ast.parse(Path(mod.__file__).read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("slurmkit.report"):
            found.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            assert not [a.name for a in node.names if a.name.startswith("slurmkit.report")]
    extra = {m: names - allowed.get(m, set()) for m, names in found.items() if names - allowed.get(m, set())}
    assert not extra, extra
