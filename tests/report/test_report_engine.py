"""The DuckDB engine gives the reference's answer: on the hand-worked fixtures, the real
dump, and hypothesis-generated dumps (requeued attempts, duplicates, `|` in names,
short and long rows, epoch and ISO times across a DST change, running jobs, garbage
and impossible rows). The reference is the pure-Python parser and aggregator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

duckdb = pytest.importorskip("duckdb")

from slurmkit.report import engine, sacct  # noqa: E402
from slurmkit.report.aggregate import finish, reference_accumulate  # noqa: E402
from slurmkit.report.cost import PriceTable  # noqa: E402
from slurmkit.report.lost import DrainEvent, reference_lost, reference_suspect  # noqa: E402
from slurmkit.report.window import Window, resolve_window  # noqa: E402

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "hb-jobinfo-sacct.txt"


def _strip(data: dict) -> dict:
    data["meta"].pop("engine", None)
    data["meta"].pop("generated_at", None)
    return data


@pytest.mark.parametrize(
    "fixture,args",
    [
        ("basic.txt", ["--since", "2026-11-01", "--until", "2026-12-01", "--now", "2026-12-01T01:30:00"]),
        ("prolog_requeue.txt", []),
        ("malformed.txt", []),
        ("impossible.txt", ["--now", "2026-12-01T00:00:00"]),
    ],
)
@pytest.mark.parametrize(
    "by",
    [
        "account,user",
        "day",
        "week",
        "node",
        "gpu_type",
        "user,gpu_type,day",
        "state",
        "partition,node,month",
        "",
    ],
)
def test_fixtures_same_json_both_engines(cli, fixture_path, fixture, args, by):
    common = [
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path(fixture),
        *args,
        "--by",
        by,
        "--json",
        "--price",
        "h100=2.5,a100=1.2,default=2",
    ]
    ref = cli(*common, "--engine", "python")
    duck = cli(*common, "--engine", "duckdb")
    assert ref.exit_code == duck.exit_code == 0, (ref.stderr, duck.stderr)
    assert ref.stderr == duck.stderr
    a, b = _strip(json.loads(ref.stdout)), _strip(json.loads(duck.stdout))
    assert a == b


def test_engine_is_used_and_said(cli, fixture_path):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
        "--json",
        "--engine",
        "duckdb",
    )
    assert json.loads(res.stdout)["meta"]["engine"]["name"] == "duckdb"
    # malformed rows: the engine answers and names their lines, as the reference does
    args = ["report", "--trust-free-text", "--sacct-file", fixture_path("malformed.txt"), "--json"]
    res = cli(*args, "--engine", "duckdb")
    ref = cli(*args, "--engine", "python")
    assert json.loads(res.stdout)["meta"]["engine"]["name"] == "duckdb"
    assert "at line(s) 16, 17, 18, 19, 20, 21, 23:" in res.stderr and res.stderr == ref.stderr


def test_real_dump_both_engines(cli, monkeypatch):
    cols = (
        "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,"
        "Elapsed,TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,"
        "TRESUsageInMax,TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,"
        "MaxVMSizeNode,MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,"
        "Comment"
    )
    monkeypatch.setenv("TZ", "Europe/Amsterdam")
    time.tzset()
    sacct.clear_time_caches()
    for by in ("user", "day", "node", "gpu_type"):
        common = [
            "report",
            "--trust-free-text",
            "--sacct-file",
            str(REAL),
            "--sacct-columns",
            cols,
            "--sacct-delimiter",
            "☃",
            "--now",
            "2024-04-19T12:00:00",
            "--by",
            by,
            "--json",
        ]
        ref, duck = cli(*common, "--engine", "python"), cli(*common, "--engine", "duckdb")
        assert json.loads(duck.stdout)["meta"]["engine"]["name"] == "duckdb"
        assert _strip(json.loads(ref.stdout)) == _strip(json.loads(duck.stdout))


# --------------------------------------------------------------------------- generated dumps

BASE = 1792800000  # 2026-10-24T...Z: the Europe/Berlin DST change (2026-10-25) is inside the span
_names = st.sampled_from(["train", "a|b", "x|y|z", "", "ü-name", "eval"])
_states = st.sampled_from(
    [
        "COMPLETED",
        "FAILED",
        "REQUEUED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "RUNNING",
        "CANCELLED by 1001",
        "PENDING",
        "OUT_OF_MEMORY",
    ]
)
_tres = st.sampled_from(
    [
        "gres/gpu=2",
        "gres/gpu:h100=4,gres/gpu=4",
        "gres/gpu:a100=2,gres/gpu:h100=2,gres/gpu=4",
        "billing=1,cpu=1",
        "gres/gpu=x",
        "gres/gpu=100000000000000",
        "gres/gpu:h100=8,gres/gpu=8",
        "gres/gpumem=80G,gres/gpu=1",
        # typed and untyped counts that disagree: the untyped total wins (gpus_from_tres)
        "gres/gpu:h100=2,gres/gpu=8",
        "gres/gpu:h100=8,gres/gpu=2",
        "gres/gpu:a100=1,gres/gpu:h100=2",
        "",
    ]
)
_nodes = st.sampled_from(["node1", "node[1-2]", "gpu[01-04]", "None assigned", "node1,node1", "bad[", ""])
_reason = st.sampled_from(["None", "launch_failed_requeued_held", "Prolog", "ReqNodeNotAvail"])


@st.composite
def _time(draw, iso: bool, clean: bool = False):
    kinds = ["t"] if clean else ["t"] * 8 + ["Unknown", "None", "", "garbage", "old"]
    kind = draw(st.sampled_from(kinds))
    if kind == "t":
        # anywhere in four days, or exactly on an edge: the window's, a drain's (DRAIN_TIMES) or
        # the start of a drain's suspect window (6 h before it)
        t = BASE + draw(st.one_of(st.integers(0, 4 * 86400), st.sampled_from(EDGES)))
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if iso else str(t)
    return {"old": "946000000"}.get(kind, kind)


_GOOD_TRES = [
    "gres/gpu=2",
    "gres/gpu:h100=4,gres/gpu=4",
    "gres/gpu:a100=2,gres/gpu:h100=2,gres/gpu=4",
    "billing=1,cpu=1",
    "gres/gpu:h100=8,gres/gpu=8",
    "gres/gpumem=80G,gres/gpu=1",
    "gres/gpu:h100=2,gres/gpu=8",
    "gres/gpu:h100=8,gres/gpu=2",
    "gres/gpu:a100=1,gres/gpu:h100=2",
    "",
]
#: the drains the tests join (node2, gpu03), as offsets from BASE
DRAIN_TIMES = (86400, 2 * 86400)
EDGES = (3600, 2 * 86400 + 7, *DRAIN_TIMES, *(t - 6 * 3600 for t in DRAIN_TIMES))
#: how long an attempt lasts: anything up to two days, or exactly at the prolog-requeue boundary
_DURATION = st.one_of(st.integers(0, 2 * 86400), st.sampled_from([119, 120, 121]))


@st.composite
def _row(draw, iso: bool, clean: bool):
    """One sacct row (or two, for an exact duplicate). ``clean`` rows are never
    malformed, so the engine's own path is compared; the others may be anything."""
    jid = str(draw(st.integers(1, 12)))
    job_id = draw(st.sampled_from([jid, jid, f"{jid}_1", f"{jid}.batch", f"{jid}.0", f"{jid}.extern"]))
    state = draw(_states)
    pending = clean and state == "PENDING"
    start = draw(st.sampled_from(["Unknown", "None"])) if pending else draw(_time(iso, clean))
    if (clean or draw(st.booleans())) and start not in ("Unknown", "None", "", "garbage", "946000000"):
        s = int(start) if not iso else int(time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S")))
        e = s + draw(_DURATION)
        end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(e)) if iso else str(e)
        if clean and state == "RUNNING" and draw(st.booleans()):
            end = "Unknown"
    else:
        end = draw(_time(iso))
    fields = [
        job_id,
        jid,
        state,
        draw(st.sampled_from(_GOOD_TRES) if clean else _tres),
        # (a Submit sacct does not know is not malformed: the attempt has no queue wait)
        "Unknown" if draw(st.integers(0, 7)) == 0 else draw(_time(iso, clean)),
        start,
        end,
        "0",
        draw(st.sampled_from(["alice", "bob", ""])),
        draw(st.sampled_from(["research", "ops"])),
        draw(st.sampled_from(["gpu", "debug"])),
        draw(_nodes),
        draw(_reason),
        draw(_names),
    ]
    shape = "ok" if clean else draw(st.sampled_from(["ok"] * 12 + ["short", "blank", "dup"]))
    line = "|".join(fields)
    if (
        shape == "ok"
        and state not in ("RUNNING", "PENDING")
        and end not in ("Unknown", "None", "")
        and not draw(st.integers(0, 7))
    ):
        # the same attempt seen twice in one dump: still RUNNING (End unknown), and finished
        running = "|".join(fields[:2] + ["RUNNING"] + fields[3:6] + ["Unknown"] + fields[7:])
        return [running, line] if draw(st.booleans()) else [line, running]
    if shape == "short":
        line = "|".join(fields[: draw(st.integers(1, 10))])
    elif shape == "blank":
        line = draw(st.sampled_from(["", "   "]))
    return [line, line] if shape == "dup" else [line]


def _reference(path, window, now, by, prices, drains, hours=6.0, filters=None):
    attempts, stats, _ = sacct.read_sacct_file(path, window=window, now=now, filters=filters)
    lost = reference_lost(attempts, 120)
    suspect = reference_suspect(attempts, drains, hours) if drains is not None else None
    groups, total = reference_accumulate(
        attempts, by, window_start=window.start, lost=lost, suspect=suspect, prices=prices
    )
    rep = finish(groups, total, by, priced=bool(prices and prices.enabled), health=drains is not None)
    return rep, stats


def _compare(a, b, tol):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            _compare(a[k], b[k], tol)
        elif isinstance(a[k], float) and isinstance(b[k], (int, float)) and tol:
            assert b[k] == pytest.approx(a[k], abs=tol), k
        else:
            assert a[k] == b[k], k


def _same_report(ref, got, by, tol):
    """The same rows (by their group keys; ranks may differ only among equal inexact values) and
    totals, to ``tol`` where values are floating point."""
    a = {tuple(r[d] for d in by): r for r in ref.rows}
    b = {tuple(r[d] for d in by): r for r in got.rows}
    assert a.keys() == b.keys()
    for k in a:
        ra, rb = dict(a[k]), dict(b[k])
        if tol:
            ra.pop("rank"), rb.pop("rank")
        _compare(ra, rb, tol)
    _compare(ref.totals, got.totals, tol)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    iso=st.booleans(),
    clean=st.sampled_from([True, True, True, False]),
    by=st.sampled_from(
        [
            [],
            ["user"],
            ["account", "user"],
            ["state"],
            ["day"],
            ["week"],
            ["node"],
            ["gpu_type"],
            ["user", "gpu_type", "day"],
            ["partition", "node", "month"],
            ["account", "gpu_type", "node"],
        ]
    ),
    windowed=st.booleans(),
    priced=st.booleans(),
    drained=st.booleans(),
    user_filter=st.booleans(),
)
def test_generated_dumps_same_answer(
    tmp_path_factory, monkeypatch, data, iso, clean, by, windowed, priced, drained, user_filter
):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    sacct.clear_time_caches()
    rows = data.draw(st.lists(_row(iso, clean), max_size=40))
    path = tmp_path_factory.mktemp("gen") / "dump.txt"
    lines = [line for group in rows for line in group]
    if clean:  # two clean rows may come out identical: that is an (impossible) duplicate
        lines = list(dict.fromkeys(lines))
    path.write_text("|".join(sacct.FIELDS) + "\n" + "".join(line + "\n" for line in lines))
    now = BASE + 3 * 86400
    window = (
        Window(BASE + 3600, BASE + 2 * 86400 + 7, "w") if windowed else resolve_window(default_unbounded=True)
    )
    prices = PriceTable({"h100": 2.5}, 1.25) if priced else None
    drains = [DrainEvent(n, BASE + t) for n, t in zip(("node2", "gpu03"), DRAIN_TIMES)] if drained else None
    filters = sacct.Filters(users=frozenset({"alice"})) if user_filter else None
    ref, ref_stats = _reference(str(path), window, now, by, prices, drains, filters=filters)
    src = engine.probe_file(str(path))
    # malformed, impossible and duplicate rows too: the engine reports their lines (stats below)
    groups, total, stats = engine.run(
        src,
        window=window,
        now=now,
        filters=filters,
        by=by,
        prices=prices,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
        drains=drains,
    )
    got = finish(groups, total, by, priced=bool(prices and prices.enabled), health=drains is not None)
    assert stats.to_dict() == ref_stats.to_dict()
    # whole GPU-seconds are exact; node/GPU-type splits are floating point
    tol = 1e-6 if any(d in ("node", "gpu_type") for d in by) or priced else 0
    assert [tuple(r[d] for d in by) for r in got.rows] == [
        tuple(r[d] for d in by) for r in ref.rows
    ] or tol  # equal-hours ties may order differently only when values are inexact
    _same_report(ref, got, by, tol)


def test_auto_engine_by_file_size(cli, fixture_path, monkeypatch):
    """`--engine auto`: the reference for small files, DuckDB from AUTO_ENGINE_BYTES up."""
    from slurmkit.report import source

    args = ("report", "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), "--json")
    assert json.loads(cli(*args).stdout)["meta"]["engine"]["name"] == "python"
    monkeypatch.setattr(source, "AUTO_ENGINE_BYTES", 1)
    assert json.loads(cli(*args).stdout)["meta"]["engine"]["name"] == "duckdb"


def _generated_archive(data, tmp_path_factory, iso: bool):
    """A directory whose ``a`` is the archive of a generated dump of clean rows (None when
    no row was ingested)."""
    from slurmkit.report import archive

    rows = data.draw(st.lists(_row(iso, True), max_size=40))
    tmp = tmp_path_factory.mktemp("arch")
    path = tmp / "dump.txt"
    lines = list(dict.fromkeys(line for group in rows for line in group))
    path.write_text("|".join(sacct.FIELDS) + "\n" + "".join(line + "\n" for line in lines))
    return None if archive.ingest(str(tmp / "a"), engine.probe_file(str(path)))["rows"] == 0 else tmp


def _read_archive(tmp, window, now, filters):
    """The reference's reading of the rows of :func:`_generated_archive`'s archive:
    ``(attempts, stats)``."""
    from slurmkit.report import archive

    return sacct.parse_rows(
        archive.lines(str(tmp / "a")),
        list(sacct.FIELDS),
        sep=archive.SEP,
        window=window,
        now=now,
        filters=filters,
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    iso=st.booleans(),
    by=st.sampled_from(
        [
            [],
            ["user"],
            ["account", "user"],
            ["day"],
            ["node"],
            ["gpu_type"],
            ["state", "week"],
            ["user", "node"],
        ]
    ),
    windowed=st.booleans(),
    drained=st.booleans(),
    name_filter=st.booleans(),
    priced=st.booleans(),
)
def test_archive_same_answer_as_reference_over_its_rows(
    tmp_path_factory, monkeypatch, data, iso, by, windowed, drained, name_filter, priced
):
    """The engine over the archive (typed columns, row groups skipped by the window) gives the
    reference's answer over the archive's rows, statistics included: rows outside the window
    and filtered rows that were never read are counted as the reference counts them."""
    from slurmkit.report import archive

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    sacct.clear_time_caches()
    tmp = _generated_archive(data, tmp_path_factory, iso)
    if tmp is None:
        return
    now = BASE + 3 * 86400
    window = (
        Window(BASE + 3600, BASE + 2 * 86400 + 7, "w") if windowed else resolve_window(default_unbounded=True)
    )
    drains = [DrainEvent("node2", BASE + DRAIN_TIMES[0])] if drained else None
    prices = PriceTable({"h100": 2.5}, 1.25) if priced else None
    filters = sacct.Filters(names=frozenset({"train"})) if name_filter else None
    attempts, ref_stats = _read_archive(tmp, window, now, filters)
    lost = reference_lost(attempts, 120)
    suspect = reference_suspect(attempts, drains, 6.0) if drains is not None else None
    ref = finish(
        *reference_accumulate(
            attempts, by, window_start=window.start, lost=lost, suspect=suspect, prices=prices
        ),
        by,
        priced=priced,
        health=drains is not None,
    )
    groups, total, stats = engine.run(
        archive.source(str(tmp / "a")),
        window=window,
        now=now,
        filters=filters,
        by=by,
        prices=prices,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
        drains=drains,
    )
    got = finish(groups, total, by, priced=priced, health=drains is not None)
    assert stats.to_dict() == ref_stats.to_dict()
    tol = 1e-6 if any(d in ("node", "gpu_type") for d in by) or priced else 0
    _same_report(ref, got, by, tol)


def _used_seconds(attempts, by: str):
    """Capacity's used GPU-seconds written out from its definition: per partition or GPU type
    (none for ``total``) and in all, GPUs x clipped seconds of each counted attempt; an
    attempt without GPUs is in no GPU type."""
    from slurmkit.report.aggregate import _type_split

    used, used_total = {}, 0.0
    for a in attempts:
        secs = a.end - a.start
        used_total += a.gpus * secs
        if by == "partition":
            used[a.partition] = used.get(a.partition, 0.0) + a.gpus * secs
        elif by == "gpu_type" and a.gpus:
            for t, n in _type_split(a):
                used[t] = used.get(t, 0.0) + n * secs
    return used, used_total


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    by=st.sampled_from(["total", "partition", "gpu_type"]),
    windowed=st.booleans(),
    partition_filter=st.booleans(),
)
def test_capacity_from_the_archive_uses_what_its_attempts_give(
    tmp_path_factory, data, by, windowed, partition_filter
):
    """``report capacity --archive`` takes each group's used GPU-seconds from the engine's usage
    sums (``used_from_usage``): the same groups and seconds as summing the attempts the
    reference reads from the archive's rows (``_used_seconds``, capacity's definition written
    out), attempts without GPUs, zero seconds and GPU types split or scaled included."""
    from slurmkit.report import archive
    from slurmkit.report.capacity import used_from_usage

    tmp = _generated_archive(data, tmp_path_factory, iso=False)
    if tmp is None:
        return
    now = BASE + 3 * 86400
    window = Window(BASE + 3600, BASE + 2 * 86400 + 7, "w") if windowed else Window(BASE, now, "w")
    filters = sacct.Filters(partitions=frozenset({"gpu"})) if partition_filter else None
    attempts, _ = _read_archive(tmp, window, now, filters)
    want, want_total = _used_seconds(attempts, by)
    groups, total, _ = engine.run(
        archive.source(str(tmp / "a")),
        window=window,
        now=now,
        filters=filters,
        by=[] if by == "total" else [by],
        prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
    )
    got, got_total = used_from_usage(groups, total, by)
    assert got.keys() == want.keys()
    for key, seconds in want.items():
        assert got[key] == pytest.approx(seconds, abs=1e-6), key
    assert got_total == pytest.approx(want_total, abs=1e-6)


def test_session_spills_to_a_private_directory_it_removes(tmp_path, monkeypatch):
    """DuckDB's default spill directory for an in-memory database is ``.tmp`` in the working
    directory: the engine gives it a private one and removes it."""
    monkeypatch.chdir(tmp_path)
    with engine.session() as con:
        spill = con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
        assert spill.startswith("/") and "slurmkit-duckdb-" in spill
        assert (Path(spill).stat().st_mode & 0o077) == 0  # mkdtemp: 0700
        con.execute("SET memory_limit = '20MB'")
        con.execute("CREATE TEMP TABLE t AS SELECT range AS i, repeat('x', 50) AS s FROM range(3000000)")
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 3000000
        assert os.listdir(spill)  # the table did not fit in 20 MB: it spilled there
    assert not Path(spill).exists()
    assert not (tmp_path / ".tmp").exists()


#: a command whose DuckDB query gets SIGINT half a second in (the query alone takes seconds)
_INTERRUPTED_COMMAND = """
import os, signal, threading
import click
from slurmkit.cli.common import run_main
from slurmkit.report import engine
signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background shell ignores SIGINT)

@click.command()
def long_query():
    with engine.session() as con:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        con.execute("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3").fetchall()

run_main(long_query, "slurmkit")
"""


def test_ctrl_c_during_a_query_ends_the_command_as_interrupted(tmp_path):
    """DuckDB answers SIGINT during a query with ``RuntimeError("Query interrupted")`` and drops
    the KeyboardInterrupt: the session gives it back, so the command says it was interrupted
    and exits 130 (before, ``internal error: RuntimeError``, exit 70), and its spill directory
    is removed."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    res = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_COMMAND], env=env, capture_output=True, text=True, timeout=120
    )
    assert (res.returncode, res.stderr) == (130, "\nslurmkit: interrupted\n")  # (click ends the ^C line)
    assert os.listdir(tmp_path) == []


def test_other_errors_inside_a_session_are_not_an_interrupt():
    with pytest.raises(RuntimeError, match="^Query interrupted twice$"):
        with engine.session():
            raise RuntimeError("Query interrupted twice")


def test_a_session_duckdb_cannot_open_leaves_no_directory(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise duckdb.IOException("no memory for a buffer pool")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(engine.duckdb, "connect", refuse)
    with pytest.raises(duckdb.IOException):
        with engine.session():
            pass  # pragma: no cover - the session does not open
    assert os.listdir(tmp_path) == []


def test_engine_refuses_a_pipe(cli, tmp_path):
    """The engine reads the file twice at once (DuckDB, and a thread counting its lines): a named
    pipe gets a clear error, not two readers splitting its data."""
    fifo = tmp_path / "dump.fifo"
    os.mkfifo(fifo)
    res = cli("report", "--trust-free-text", "--sacct-file", str(fifo), "--engine", "duckdb", "--json")
    assert res.exit_code == 2 and "reads a regular file" in res.stderr


# --------------------------------------------------------------------------- the narrow table and its second reading

_HEADER = "|".join(sacct.FIELDS) + "\n"


def _row_text(
    jid="7", state="COMPLETED", start=str(BASE), end=str(BASE + 3600), name="train", job_id=None, **more
):
    """One job row; ``more``: other fields by their sacct name (``NodeList="node[1-2]"``)."""
    fields = dict.fromkeys(sacct.FIELDS, "")
    fields.update(
        JobID=job_id or jid,
        JobIDRaw=jid,
        State=state,
        AllocTRES="gres/gpu=2",
        Submit=str(BASE - 60),
        Start=start,
        End=end,
        ElapsedRaw="3600",
        User="alice",
        Account="research",
        Partition="gpu",
        NodeList="node1",
        Reason="None",
        JobName=name,
    )
    fields.update(more)
    return "|".join(fields[f] for f in sacct.FIELDS) + "\n"


def _both(tmp_path, text, by=("user",), monkeypatch=None):
    """(reference report, engine report, the engine's readings: False = narrow, True = whole)."""
    path = tmp_path / "dump.txt"
    path.write_text(text, newline="")
    window = resolve_window(default_unbounded=True)
    now = BASE + 3 * 86400
    ref, ref_stats = _reference(str(path), window, now, list(by), None, None)
    readings = []
    real_run = engine._run

    def spy(*args, full=False):
        readings.append(full)
        return real_run(*args, full=full)

    monkeypatch.setattr(engine, "_run", spy)
    groups, total, stats = engine.run(
        engine.probe_file(str(path)),
        window=window,
        now=now,
        filters=None,
        by=list(by),
        prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
    )
    assert stats.to_dict() == ref_stats.to_dict()
    got = finish(groups, total, list(by), priced=False, health=False)
    return ref, got, readings


def test_rows_of_one_job_tied_in_time_are_two_attempts_in_one_reading(tmp_path, monkeypatch):
    """Two attempts of job 7 with the same Start and End but different names are two attempts, not
    duplicates; their order matters to no rule (the job was not requeued): one narrow reading."""
    text = _HEADER + _row_text(name="a") + _row_text(name="b") + _row_text(jid="8")
    ref, got, readings = _both(tmp_path, text, monkeypatch=monkeypatch)
    assert readings == [False]
    assert got.totals == ref.totals and got.rows == ref.rows
    assert got.totals["jobs"] == 2 and got.totals["gpu_hours"] == pytest.approx(6.0)


def test_requeued_rows_tied_in_state_and_reason_are_read_again_whole(tmp_path, monkeypatch):
    """A requeued job's FAILED rows tied in Start, End, State and Reason, differing in AllocTRES: the
    prolog rule's order needs their content, which the narrow table does not keep (the one case
    read again)."""
    end = str(BASE + 60)
    text = _HEADER + _row_text(state="REQUEUED", end=end, Reason="launch_failed_requeued_held")
    later = {"start": str(BASE + 120), "end": str(BASE + 180), "state": "FAILED"}
    text += _row_text(**later) + _row_text(**later, AllocTRES="gres/gpu=4")
    ref, got, readings = _both(tmp_path, text, by=("user", "state"), monkeypatch=monkeypatch)
    assert readings == [False, True]
    assert got.totals == ref.totals and got.rows == ref.rows


def test_exact_duplicate_rows_are_found_in_one_reading(tmp_path, monkeypatch):
    """The later copy is the impossible row, at its line, as the reference reports it (_both
    compares the statistics, line numbers included)."""
    text = _HEADER + _row_text() + _row_text(jid="8") + _row_text() + _row_text()
    ref, got, readings = _both(tmp_path, text, monkeypatch=monkeypatch)
    assert readings == [False]
    assert got.totals == ref.totals and got.totals["jobs"] == 2


def test_job_ids_that_are_not_plain_numbers_are_each_a_job(tmp_path, monkeypatch):
    """JobIDRaw "0123" and "123" are two jobs to the reference; as numbers they would be one."""
    text = _HEADER + _row_text(jid="123") + _row_text(jid="0123", start=str(BASE + 10))
    text += _row_text(jid="0123", start=str(BASE + 20)) + _row_text(jid="00123", start=str(BASE + 20))
    ref, got, readings = _both(tmp_path, text, monkeypatch=monkeypatch)
    assert readings == [False]
    assert got.totals == ref.totals and got.totals["jobs"] == 3


def test_plain_dump_is_read_once_narrow(tmp_path, monkeypatch):
    text = _HEADER + _row_text() + _row_text(jid="8", state="REQUEUED", end=str(BASE + 60))
    text += _row_text(jid="8", state="FAILED", start=str(BASE + 120), end=str(BASE + 180))
    ref, got, readings = _both(tmp_path, text, by=("user", "state"), monkeypatch=monkeypatch)
    assert readings == [False]
    assert got.totals == ref.totals and got.rows == ref.rows


@pytest.mark.parametrize(
    "start", ["1234567e03", "+179280000", " 179280000", "1_79280000", "0179280000", "1.79280e9"]
)
def test_times_the_cast_takes_but_the_reference_does_not(tmp_path, monkeypatch, start):
    """DuckDB's cast to BIGINT takes these; the reference's parser calls them bad times (the engine
    too, at the same line: _both compares the statistics)."""
    text = _HEADER + _row_text(start=start) + _row_text(jid="8")
    ref, got, readings = _both(tmp_path, text, monkeypatch=monkeypatch)
    assert readings == [False] and got.totals == ref.totals


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\n"])
def test_line_breaks_and_empty_lines_count_as_the_reference_does(tmp_path, monkeypatch, newline):
    """Step rows are counted from the rows DuckDB's reader read; it breaks lines where Python's
    universal newlines do and skips empty lines, which the reference does not count either."""
    step = _row_text(jid="7.batch", job_id="7.batch")
    lines = [_HEADER, _row_text(), step, "\n", "  \n", step, _row_text(jid="8"), "\n"]
    text = "".join(line.replace("\n", newline) for line in lines)
    ref, got, readings = _both(tmp_path, text, monkeypatch=monkeypatch)
    assert readings == [False]
    assert got.totals == ref.totals


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="0123456789eE+-._ xXbBoO\t", min_size=1, max_size=12),
            st.integers(min_value=0, max_value=10**12).map(str),
            st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 10**9), st.integers(0, 12)),
            st.text(min_size=1, max_size=12),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_plain_int_takes_exactly_plain_digits(texts):
    """The engine's cheap number test agrees with the reference's rule (ASCII digits only) on every
    text it takes, and takes every plain number of the lengths asked for, without a leading zero."""
    con = duckdb.connect()
    for shortest, longest in ((9, 10), (1, 18)):  # epochs, JobIDRaw
        got = con.execute(
            f"""SELECT r_x, {engine._plain_int("x", shortest, longest)} FROM (
                SELECT r_x, TRY_CAST(r_x AS BIGINT) AS v_x, length(r_x) AS l_x FROM (SELECT unnest(?) AS r_x))""",
            [texts],
        ).fetchall()
        for text, value in got:
            plain = text.isascii() and text.isdigit() and not text.startswith("0")
            plain = plain and shortest <= len(text) <= longest
            assert value == (int(text) if plain else None), text


@st.composite
def _attempt_chains(draw):
    """Dump text of jobs with one to four attempts each, at distinct Starts (no ties, so the narrow
    table decides their order): REQUEUED, FAILED and the rest, launch and prolog Reasons, and
    durations on both sides of the prolog-requeue threshold (120 s)."""
    lines = [_HEADER]
    for jid in range(1, draw(st.integers(1, 8)) + 1):
        start = BASE + draw(st.integers(0, 3 * 86400))
        for _ in range(draw(st.integers(1, 4))):
            duration = draw(st.sampled_from([0, 60, 119, 120, 121, 600, 7200]))
            state = draw(st.sampled_from(["REQUEUED", "FAILED", "COMPLETED", "NODE_FAIL", "PREEMPTED"]))
            lines.append(
                _row_text(
                    jid=str(jid),
                    state=state,
                    start=str(start),
                    end=str(start + duration),
                    Reason=draw(_reason),
                    User=draw(st.sampled_from(["alice", "bob"])),
                    NodeList=draw(st.sampled_from(["node1", "node[1-2]"])),
                )
            )
            start += duration + draw(st.integers(1, 3600))
    return "".join(lines)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    text=_attempt_chains(),
    by=st.sampled_from([("user",), ("state",), ("node",), ("day",), ("user", "state")]),
)
def test_attempt_chains_same_answer_in_one_narrow_reading(tmp_path_factory, monkeypatch, text, by):
    """The rules over a job's attempts (distinct jobs, the prolog-requeue cause) from the narrow
    table, read once, equal the reference's."""
    with monkeypatch.context() as m:
        ref, got, readings = _both(tmp_path_factory.mktemp("chains"), text, by=by, monkeypatch=m)
    assert readings == [False]
    _same_report(ref, got, by, 1e-6 if "node" in by else 0)  # (a 2-node job's halves are floats)


# --------------------------------------------------------------------------- attempts over many periods


@st.composite
def _long_attempts(draw):
    """Dump text of attempts from none to ten weeks long, over two month ends and the Europe/Berlin
    DST change, some still running: the day, week and month views split most of them."""
    lines = [_HEADER]
    first_day = BASE - BASE % 86400 - 60 * 86400  # a UTC midnight
    # or a second before, at or after a local midnight: every offset is a multiple of 900 s;
    # those of the test's zones (Berlin 23:00 and 22:00 UTC, St John's 03:30 and 02:30 UTC,
    # Kathmandu 18:15 UTC) and UTC's own
    at_midnight = st.builds(
        lambda day, quarter, second: first_day + day * 86400 + quarter * 900 + second,
        st.integers(0, 63),
        st.sampled_from([0, 92, 88, 14, 10, 73]),
        st.sampled_from([-1, 0, 1]),
    )
    for jid in range(1, draw(st.integers(1, 10)) + 1):
        start = draw(st.integers(0, 63 * 86400).map(lambda x: BASE - 60 * 86400 + x) | at_midnight)
        for _ in range(draw(st.integers(1, 3))):
            duration = draw(
                st.sampled_from([0, 1, 900, 86399, 86400, 86401, 7 * 86400, 35 * 86400])
                | st.integers(0, 70 * 86400)
            )
            state = draw(st.sampled_from(["COMPLETED", "FAILED", "REQUEUED", "NODE_FAIL", "RUNNING"]))
            end = "Unknown" if state == "RUNNING" and draw(st.booleans()) else str(start + duration)
            lines.append(
                _row_text(
                    jid=str(jid),
                    state=state,
                    start=str(start),
                    end=end,
                    Submit=str(start - draw(st.integers(-60, 7200))),
                    AllocTRES=draw(st.sampled_from(_GOOD_TRES)),
                    User=draw(st.sampled_from(["alice", "bob"])),
                    Account=draw(st.sampled_from(["research", "ops"])),
                    NodeList=draw(st.sampled_from(["node1", "node2", "node[1-2]"])),
                )
            )
            gap = draw(st.integers(1, 86400) | st.sampled_from([0, 1]))
            # (back to back, but never twice the same zero-length attempt: an exact duplicate row,
            # which the engine hands to the reference for its line number)
            start += duration + (gap if gap or duration else 1)
    return "".join(lines)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    text=_long_attempts(),
    by=st.sampled_from(
        [("day",), ("week",), ("month",), ("user", "day"), ("month", "account"), ("state", "week")]
    ),
    windowed=st.booleans(),
    priced=st.booleans(),
    drained=st.booleans(),
    zone=st.sampled_from(["Europe/Berlin", "UTC", "America/St_Johns", "Asia/Kathmandu"]),
    max_runs=st.sampled_from([engine.MAX_PERIOD_RUNS, 1, 0]),
)
def test_attempts_over_many_periods_same_answer(
    tmp_path_factory, monkeypatch, text, by, windowed, priced, drained, zone, max_runs
):
    """A view by period sums each attempt's pieces from per-group sums (``_period_first_pass``):
    attempts over many days, weeks and months, cut by the window, equal the reference's pieces.
    Zones with DST changes in the span, none, and offsets of half and three quarters of an
    hour; the period of an instant computed from runs of equal periods or, past ``max_runs``
    of them, looked up by its 15-minute bucket."""
    monkeypatch.setattr(engine, "MAX_PERIOD_RUNS", max_runs)
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    sacct.clear_time_caches()
    path = tmp_path_factory.mktemp("long") / "dump.txt"
    path.write_text(text)
    now = BASE + 3 * 86400
    window = (
        Window(BASE - 30 * 86400 + 12345, BASE + 2 * 86400 + 7, "w")
        if windowed
        else resolve_window(default_unbounded=True)
    )
    prices = PriceTable({"h100": 2.5}, 1.25) if priced else None
    drains = [DrainEvent("node2", BASE - 20 * 86400), DrainEvent("node1", BASE + 86400)] if drained else None
    ref, ref_stats = _reference(str(path), window, now, list(by), prices, drains)
    groups, total, stats = engine.run(
        engine.probe_file(str(path)),
        window=window,
        now=now,
        filters=None,
        by=list(by),
        prices=prices,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
        drains=drains,
    )
    got = finish(groups, total, list(by), priced=priced, health=drains is not None)
    assert stats.to_dict() == ref_stats.to_dict()
    _same_report(ref, got, list(by), 1e-6 if priced else 0)  # (whole GPU-seconds are exact)


@pytest.mark.parametrize("by", [("day",), ("week",), ("month",), ("user", "day")])
@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin"])
def test_a_zero_length_attempt_at_the_last_end_has_its_period(tmp_path, monkeypatch, by, zone):
    """Over a window longer than two years the periods span the data: first Start to last End.
    The last attempt takes no time and starts at that End, a local midnight (a month's first):
    its one piece is in the period that starts there, which the periods must include."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    sacct.clear_time_caches()
    midnight = int(time.mktime((2026, 10, 1, 0, 0, 0, 0, 0, -1)))  # a Thursday, before BASE
    text = (
        _HEADER
        + _row_text(jid="1", start=str(midnight - 7200), end=str(midnight))
        + _row_text(jid="2", start=str(midnight), end=str(midnight))
    )
    ref, got, _ = _both(tmp_path, text, by, monkeypatch)
    _same_report(ref, got, list(by), 0)
    assert got.totals["attempts"] == 2 and got.totals["gpu_hours"] == 4.0
    period = by[-1]
    # the week holds both attempts; the day and the month that start at the midnight hold the second
    assert [(r[period], r["attempts"]) for r in got.rows][-1] == (
        {"day": "2026-10-01", "week": "2026-W40", "month": "2026-10"}[period],
        2 if period == "week" else 1,
    )


@pytest.mark.parametrize("by", [("node",), ("gpu_type",), ("gpu_type", "node"), ("user", "node")])
def test_split_by_lookup_shares_suspect_hours(tmp_path, by):
    """A view by node or GPU type splits each group's sums by the look-up tables
    (``_lookup_first_pass``): suspect hours split like the rest. Job 1 ran on node[1-2] and job 2 on
    node2 before node2 was drained (both suspect); job 3 on node1 only."""

    def row(jid, nodes, tres, start, end):
        return _row_text(jid=jid, start=str(start), end=str(end), NodeList=nodes, AllocTRES=tres)

    path = tmp_path / "dump.txt"
    path.write_text(
        _HEADER
        + row("1", "node[1-2]", "gres/gpu=4", BASE, BASE + 3600)
        + row("2", "node2", "gres/gpu:a100=2,gres/gpu:h100=2,gres/gpu=4", BASE + 1800, BASE + 5400)
        + row("3", "node1", "gres/gpu=1", BASE, BASE + 3600)
    )
    window, now = resolve_window(default_unbounded=True), BASE + 3 * 86400
    drains = [DrainEvent("node2", BASE + 7200)]
    ref, _ = _reference(str(path), window, now, list(by), None, drains)
    groups, total, _ = engine.run(
        engine.probe_file(str(path)),
        window=window,
        now=now,
        filters=None,
        by=list(by),
        prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
        drains=drains,
    )
    got = finish(groups, total, list(by), priced=False, health=True)
    _same_report(ref, got, list(by), 1e-9)
    if by == ("node",):  # by hand: node1 2 + 1 GPU-hours (2 suspect), node2 2 + 4 (all suspect)
        rows = {r["node"]: (r["gpu_hours"], r["suspect_gpu_hours"]) for r in got.rows}
        assert rows == {"node1": (3.0, 2.0), "node2": (6.0, 6.0)}
    if by == ("gpu_type",):
        rows = {r["gpu_type"]: r["suspect_gpu_hours"] for r in got.rows}
        assert rows["a100"] == rows["h100"] == 2.0


def test_malformed_rows_between_empty_lines_have_the_reference_line_numbers(tmp_path, monkeypatch):
    """Line numbers count empty and blank lines, leading comment lines and the header, as the
    reference's do; one narrow reading."""
    bad = _row_text(jid="9", start=str(BASE + 7200), end=str(BASE + 3600))  # end before start
    text = (
        "\n# saved by hand\n"
        + _HEADER
        + "\n"
        + _row_text()
        + "  \n\n"
        + bad
        + "7|7|short\n\n"
        + bad.replace("|9|", "|10|")
    )
    for newline in ("\n", "\r\n"):
        ref, got, readings = _both(tmp_path, text.replace("\n", newline), monkeypatch=monkeypatch)
        assert readings[-1:] == [False] and got.totals == ref.totals


def test_a_line_with_a_nul_byte_goes_to_the_reference(tmp_path):
    path = tmp_path / "dump.txt"
    path.write_text(_HEADER + _row_text(name="a\x00b") + _row_text(jid="8"))
    with pytest.raises(engine.NeedsReference, match="reader"):
        engine.run(
            engine.probe_file(str(path)),
            window=resolve_window(default_unbounded=True),
            now=BASE + 86400,
            filters=None,
            by=["user"],
            prices=None,
            max_gpus=sacct.DEFAULT_MAX_GPUS,
            prolog_requeue_seconds=120,
        )
